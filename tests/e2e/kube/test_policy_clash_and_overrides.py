"""RecoveryPolicy name clashes across namespaces, and WorkloadRecovery overrides, on the real apiserver.

One real ``trainguard operator`` serves three namespaces; the first is its own (``--workload-namespace``).

1. Name clash: the same policy name in several namespaces. The documented rule (docs/operator.md,
   ``k8s/policies.py``): the policy in the operator's namespace wins, else the oldest; every policy of
   the clash shows ``Conflicting=True`` naming the one in force, the others ``Accepted=False`` with
   reason ``DuplicateName``; when the winner goes, the next one takes over.
2. ``spec.overrides.maxRetries: 0`` on a job's WorkloadRecovery is honoured: the job's Xid failure
   gets the advice ``stop`` (retry budget used up) instead of the policy's ``requeue``.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.kube import operator_process as op
from tests.e2e.kube.test_operator import OPERATOR_NS, SERVICE_ACCOUNT, condition, policy_yaml
from tests.support import kube
from tests.support.slurm import SlurmCluster
from trainguard.k8s import status

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.slurm, pytest.mark.timeout(900)]

REPO_ROOT = Path(__file__).resolve().parents[3]
WAIT_S = 120.0

GATED_JOB = """#!/bin/bash
#SBATCH --comment="trainguard policy={policy}"
#SBATCH --nodes=1
#SBATCH --job-name={name}
echo "iteration 1 on $SLURMD_NODENAME"
while [ ! -e {go} ]; do sleep 0.5; done
echo "$(date '+%b %d %H:%M:%S') $SLURMD_NODENAME kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=$$, name=python, \
GPU has fallen off the bus." >&2
exit 1
"""
"""A job that fails with an Xid 79 once the test lets it (after the override is in place)."""


@dataclass
class Served:
    api: kube.LocalKube
    slurm: SlurmCluster
    namespaces: tuple[str, str, str]
    process: op.OperatorProcess
    cluster_name: str
    jobs: list[str] = field(default_factory=list)

    def diagnose(self) -> str:
        return f"--- operator log ---\n{self.process.tail(60)}"

    def policy(self, name: str, namespace: str) -> dict[str, Any]:
        return op.get_json(self.api, "recoverypolicy", name, "-n", namespace)


@pytest.fixture(scope="module")
def served(kube_api: kube.LocalKube, slurm_cluster: SlurmCluster,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    op.ok(kube_api.kubectl("apply", "-k", str(REPO_ROOT / "crds")))
    for crd in ("recoverypolicies.trainguard.dev", "workloadrecoveries.trainguard.dev"):
        op.ok(kube_api.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s"))
    base = REPO_ROOT / "manifests" / "base"
    op.ok(kube_api.kubectl("apply", "-f", str(base / "namespace.yaml"), "-f", str(base / "serviceaccount.yaml"),
                           "-f", str(base / "rbac.yaml")))
    # Named so that the plain namespace order contradicts the rule at every step: the operator's own
    # namespace sorts last, and the policy created first lives in the namespace that sorts second.
    home, team_b, team_c = (kube.unique_name(prefix) for prefix in ("tg-z-home", "tg-y-team", "tg-x-team"))
    for namespace in (home, team_b, team_c):
        op.ok(kube_api.kubectl("create", "namespace", namespace))
    directory = tmp_path_factory.mktemp("clash")
    kubeconfig = kube_api.service_account_kubeconfig(SERVICE_ACCOUNT, OPERATOR_NS, directory / "kubeconfig")
    process = op.OperatorProcess(
        ["--scheduler", "slurm-local", "--namespace", home, "--namespace", team_b, "--namespace", team_c,
         "--workload-namespace", home, "--poll", "1", "--status-interval", "1",
         "--db", f"sqlite+aiosqlite:///{directory / 'audit.db'}"],
        op.operator_env(kubeconfig, slurm_cluster.env, directory), directory / "operator.log")
    process.start()
    config = slurm_cluster.scontrol("show", "config")
    cluster = next(line.split("=", 1)[1].strip() for line in config.splitlines()
                   if line.split("=", 1)[0].strip() == "ClusterName")
    result = Served(kube_api, slurm_cluster, (home, team_b, team_c), process, cluster)
    try:
        yield result
    finally:
        for job_id in result.jobs:
            slurm_cluster.run("scancel", job_id)
        code = process.stop()
        for namespace in (home, team_b, team_c):
            kube_api.kubectl("delete", "namespace", namespace, "--wait=false")
        assert code == 0, f"operator exited with {code}\n{result.diagnose()}"


def _server_now(served: Served) -> str:
    """The apiserver's own time, as a creationTimestamp (a server-side dry run creates nothing)."""
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"clock-{secrets.token_hex(3)}",
                                                                  "namespace": served.namespaces[0]}}
    done = served.api.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(probe))
    return str(json.loads(op.ok(done))["metadata"]["creationTimestamp"])


def _state(served: Served, name: str, namespace: str) -> tuple[str, str, str, str]:
    """(Accepted status, Accepted reason, Conflicting status, Conflicting message) of one policy."""
    obj = served.policy(name, namespace)
    accepted, conflicting = condition(obj, "Accepted"), condition(obj, "Conflicting")
    return (accepted.get("status", ""), accepted.get("reason", ""), conflicting.get("status", ""),
            conflicting.get("message", ""))


def test_a_policy_name_used_in_several_namespaces_is_resolved_by_the_documented_rule(served: Served) -> None:
    home, team_b, team_c = served.namespaces
    name = f"shared-{secrets.token_hex(3)}"
    op.ok(served.api.kubectl("apply", "-f", "-", input=policy_yaml(name, team_b, "Monitor")))
    op.poll("the only policy of its name accepted, not conflicting",
            lambda: _state(served, name, team_b)[:3] == ("True", "Valid", "False"), 60, served.diagnose)

    first = served.policy(name, team_b)["metadata"]["creationTimestamp"]
    op.poll("the apiserver's clock past the first policy's creation second",
            lambda: _server_now(served) > first, 30, served.diagnose)
    op.ok(served.api.kubectl("apply", "-f", "-", input=policy_yaml(name, team_c, "Monitor")))
    older, newer = team_b, team_c  # the oldest wins, though team_c sorts first
    op.poll("the newer policy rejected as a duplicate",
            lambda: _state(served, name, newer)[:3] == ("False", "DuplicateName", "True"), 60, served.diagnose)
    for namespace in (older, newer):
        message = op.poll("Conflicting=True naming the winner",
                          lambda ns=namespace: _state(served, name, ns)[2] == "True" and _state(served, name, ns)[3],
                          60, served.diagnose)
        assert f"RecoveryPolicy {older}/{name} is in force" in message, message
    assert _state(served, name, older)[:2] == ("True", "Valid")

    # A policy of the same name in the operator's own namespace wins over both, though it is the newest.
    op.ok(served.api.kubectl("apply", "-f", "-", input=policy_yaml(name, home, "Monitor")))
    op.poll("the operator's namespace winning",
            lambda: _state(served, name, home)[:3] == ("True", "Valid", "True")
            and _state(served, name, older)[:2] == ("False", "DuplicateName"), 60, served.diagnose)
    winner = f"RecoveryPolicy {home}/{name} is in force"
    for namespace in (team_b, team_c):
        message = op.poll("Conflicting naming the policy in the operator's namespace",
                          lambda ns=namespace: winner in _state(served, name, ns)[3] and _state(served, name, ns)[3],
                          60, served.diagnose)
        assert "operator's namespace" in message

    # The winner goes: the oldest of the others takes over, and the clash is still shown between those two.
    op.ok(served.api.kubectl("delete", "recoverypolicy", name, "-n", home))
    op.poll("the oldest remaining policy in force again",
            lambda: _state(served, name, older)[:2] == ("True", "Valid")
            and f"RecoveryPolicy {older}/{name} is in force" in _state(served, name, newer)[3], 60, served.diagnose)


def test_a_max_retries_override_on_the_workloadrecovery_is_honoured(served: Served) -> None:
    home = served.namespaces[0]
    policy = f"ovr-{secrets.token_hex(3)}"
    op.ok(served.api.kubectl("apply", "-f", "-", input=policy_yaml(policy, home, "Monitor")))
    op.poll("the policy accepted", lambda: _state(served, policy, home)[0] == "True", 60, served.diagnose)
    go = served.slurm.jobs_dir / f"go-{secrets.token_hex(4)}"
    job_id = served.slurm.submit(GATED_JOB.format(policy=policy, name="tg-override", go=go))
    served.jobs.append(job_id)
    name = status.object_name(f"slurm/{served.cluster_name}/{job_id}")

    def recovery() -> dict[str, Any]:
        done = served.api.kubectl("get", "workloadrecovery", name, "-n", home, "-o", "json")
        return json.loads(done.stdout) if done.returncode == 0 else {}

    op.poll("the job's WorkloadRecovery", recovery, WAIT_S, served.diagnose)
    op.ok(served.api.kubectl("patch", "workloadrecovery", name, "-n", home, "--type", "merge",
                             "-p", json.dumps({"spec": {"overrides": {"maxRetries": 0}}})))
    op.poll("the override applied by the operator", lambda: "'max-retries': 0" in served.process.tail(200), 60,
            served.diagnose)
    go.touch()
    served.slurm.wait_for(job_id, "FAILED", timeout=WAIT_S, fail_fast=False)

    def advised() -> dict[str, Any]:
        advice = (recovery().get("status") or {}).get("advice") or {}
        # Monitored, or Converged when the desired state already held (a stop of a job that ended)
        return advice if advice.get("disposition") in ("Monitored", "Converged") else {}

    advice = op.poll("the advice in the WorkloadRecovery's status", advised, WAIT_S, served.diagnose)
    assert (advice["action"], advice["mode"]) == ("stop", "Monitor"), advice  # the policy alone would requeue
    assert any("retries exhausted (0 of maxRetries 0)" in reason for reason in advice["reasons"]), advice
