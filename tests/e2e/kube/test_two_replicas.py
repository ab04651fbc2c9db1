"""Two operator replicas with ``--peering``: only the Lease holder acts; a clean stop hands over.

Two real ``trainguard operator`` processes (same ServiceAccount, same Lease name, each with its own
audit database, so a second actor could not hide in a shared one) watch the real Slurm cluster
with an Action-mode policy. A failing job is recovered exactly once, by the holder only. Then the
holder is stopped (SIGTERM: it releases the Lease), the other replica takes over without waiting
for expiry, and recovers the next failing job.

The operator's shipped RBAC (``manifests/base``) runs one standalone replica and grants nothing on
Leases; this module adds the Role a multi-replica install needs (see docs/operator.md).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.kube import operator_process as op
from tests.e2e.kube.test_operator import JOB_SCRIPT, OPERATOR_NS, SERVICE_ACCOUNT, policy_yaml
from tests.support import kube
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.slurm, pytest.mark.timeout(900)]

REPO_ROOT = Path(__file__).resolve().parents[3]
LEASE = "trainguard"
WAIT_S = 120.0

LEASE_RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: trainguard-leader-election, namespace: {ns}}}
rules:
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [get, create, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: trainguard-leader-election, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: trainguard-leader-election}}
subjects: [{{kind: ServiceAccount, name: trainguard, namespace: trainguard-system}}]
"""


class Replicas:
    def __init__(self, api: kube.LocalKube, slurm: SlurmCluster, namespace: str, policy: str,
                 processes: list[op.OperatorProcess], dbs: list[Path]) -> None:
        self.api, self.slurm, self.namespace, self.policy = api, slurm, namespace, policy
        self.processes, self.dbs = processes, dbs

    def diagnose(self) -> str:
        return "\n".join(f"--- replica {i} ---\n{p.tail(30)}" for i, p in enumerate(self.processes))

    def holder(self) -> int | None:
        """Index of the replica holding the Lease (identity ends with its pid), or None."""
        done = self.api.kubectl("get", "lease", LEASE, "-n", self.namespace, "-o", "json")
        if done.returncode != 0:
            return None
        identity = (json.loads(done.stdout).get("spec") or {}).get("holderIdentity") or ""
        for index, process in enumerate(self.processes):
            if process.alive() and identity.endswith(f"-{process.pid}"):
                return index
        return None

    def advice_count(self, index: int, job_id: str) -> int:
        done = subprocess.run(
            [str(Path(sys.executable).with_name("trainguard")), "audit", "--db", f"sqlite+aiosqlite:///{self.dbs[index]}",
             "--kind", "advice", "--format", "json"], capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:  # no database yet: this replica never wrote anything
            return 0
        records = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        return sum(1 for r in records if str(r["workload"]).endswith(f"/{job_id}"))

    def recover(self, name: str) -> str:
        job_id = self.slurm.submit(JOB_SCRIPT.format(policy=self.policy, name=name))
        job = self.slurm.wait_for(job_id, lambda j: j.get("JobState") == "COMPLETED" and j.get("Restarts") == "1",
                                  timeout=WAIT_S, fail_fast=False)
        assert job["ExcNodeList"] != "(null)", self.diagnose()
        return job_id


@pytest.fixture(scope="module")
def replicas(kube_api: kube.LocalKube, slurm_cluster: SlurmCluster,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    op.ok(kube_api.kubectl("apply", "-k", str(REPO_ROOT / "crds")))
    base = REPO_ROOT / "manifests" / "base"
    op.ok(kube_api.kubectl("apply", "-f", str(base / "namespace.yaml"), "-f", str(base / "serviceaccount.yaml"),
                           "-f", str(base / "rbac.yaml")))
    namespace = kube.unique_name("tg-peers")
    op.ok(kube_api.kubectl("create", "namespace", namespace))
    op.ok(kube_api.kubectl("apply", "-f", "-", input=LEASE_RBAC.format(ns=namespace)))
    policy = f"e2e-{secrets.token_hex(4)}"
    op.ok(kube_api.kubectl("apply", "-f", "-", input=policy_yaml(policy, namespace, "Action")))
    directory = tmp_path_factory.mktemp("replicas")
    kubeconfig = kube_api.service_account_kubeconfig(SERVICE_ACCOUNT, OPERATOR_NS, directory / "kubeconfig")
    processes, dbs = [], []
    for index in range(2):
        home = directory / f"replica-{index}"
        home.mkdir()
        dbs.append(home / "audit.db")
        processes.append(op.OperatorProcess(
            ["--scheduler", "slurm-local", "--namespace", namespace, "--mode", "action", "--peering", LEASE,
             "--poll", "1", "--status-interval", "1", "--db", f"sqlite+aiosqlite:///{dbs[-1]}"],
            op.operator_env(kubeconfig, slurm_cluster.env, home), home / "operator.log"))
    for process in processes:
        process.start()
    result = Replicas(kube_api, slurm_cluster, namespace, policy, processes, dbs)
    try:
        yield result
    finally:
        codes = [process.stop() for process in processes]
        kube_api.kubectl("delete", "namespace", namespace, "--wait=false")
        assert all(code in (0, None) for code in codes), f"exit codes {codes}\n{result.diagnose()}"


def test_only_the_lease_holder_acts_and_a_clean_stop_hands_over(replicas: Replicas) -> None:
    op.poll("a Lease holder", lambda: replicas.holder() is not None, 60, replicas.diagnose)
    leader = replicas.holder()
    assert leader is not None
    follower = 1 - leader
    first = replicas.recover("tg-peers-1")
    op.poll("the holder's advice", lambda: replicas.advice_count(leader, first) == 1, 30, replicas.diagnose)
    assert replicas.advice_count(follower, first) == 0, replicas.diagnose()
    assert replicas.holder() == leader

    assert replicas.processes[leader].stop() == 0, replicas.diagnose()
    op.poll("the other replica holding the Lease", lambda: replicas.holder() == follower, 30, replicas.diagnose)
    second = replicas.recover("tg-peers-2")
    op.poll("the new holder's advice", lambda: replicas.advice_count(follower, second) == 1, 30,
            replicas.diagnose)
    assert replicas.advice_count(leader, second) == 0
