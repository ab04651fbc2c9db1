"""End to end: the real operator process, a real kube-apiserver, the real local Slurm cluster.

The module installs the CRDs (``crds/``) and the operator's namespace, ServiceAccount and RBAC
(``manifests/base``), and starts ``trainguard operator --mode action`` with a token of that
ServiceAccount, serving one fresh namespace. A RecoveryPolicy private to the session starts in
Monitor mode. Then, in order:

1. a failing opted-in Slurm job (an Xid 79 line naming its node, exit 1): its WorkloadRecovery
   shows the anomaly, the hardware verdict and the requeue advice (Monitored); Events exist; Slurm
   is unchanged (still FAILED, no restart, nothing excluded);
2. the policy is switched to Action with ``kubectl patch`` (the operator is not restarted): the
   next failing job is requeued without its bad node and completes; status and Events say so;
3. ``kubectl get recoveries`` prints the printer columns for these objects;
4. invalid policies: the API server's schema rejects what it can; a non-portable operator pattern
   gets ``Invalid=True`` with the reason, and the operator keeps running;
5. a real 409 from a stale resourceVersion, provoked on the real server, is absorbed by the
   status writer (re-read, recompute, one write).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import re
import secrets
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from tests.e2e.kube import operator_process as op
from tests.support import kube
from tests.support.slurm import SlurmCluster
from trainguard.k8s import client as k8s_client
from trainguard.k8s import recovery, status, status_write
from trainguard.model import vocab, workloads

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.slurm, pytest.mark.timeout(900)]

REPO_ROOT = Path(__file__).resolve().parents[3]
OPERATOR_NS = "trainguard-system"
SERVICE_ACCOUNT = "trainguard"
WAIT_S = 120.0
"""Submit -> the state checked; a job here runs ~5 s, a requeued one restarts after ~6 s; generous
for two shared cores."""

JOB_SCRIPT = """#!/bin/bash
#SBATCH --comment="trainguard policy={policy}"
#SBATCH --nodes=1
#SBATCH --job-name={name}
echo "start restarts=${{SLURM_RESTART_COUNT:-0}} on $SLURMD_NODENAME" | tee -a "attempts-$SLURM_JOB_ID.txt"
echo "iteration 1 on $SLURMD_NODENAME"
if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then
  sleep 3
  echo "$(date '+%b %d %H:%M:%S') $SLURMD_NODENAME kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=$$, name=python, \
GPU has fallen off the bus." >&2
  echo "RuntimeError: CUDA error: unspecified launch failure" >&2
  exit 1
fi
echo "iteration 2 on $SLURMD_NODENAME"
"""
"""A job whose first attempt hits a (printed) Xid 79 on its node and fails; a restart succeeds."""


@dataclasses.dataclass
class Setup:
    api: kube.LocalKube
    slurm: SlurmCluster
    namespace: str
    policy: str
    process: op.OperatorProcess
    sa_kubeconfig: Path
    jobs: list[str] = dataclasses.field(default_factory=list)
    """Jobs this module submitted (the shared cluster may list others, which are never covered)."""

    def diagnose(self) -> str:
        return f"--- operator log ---\n{self.process.tail()}"

    def recovery(self, job_id: str) -> dict[str, Any]:
        name = status.object_name(f"slurm/{self.cluster_name}/{job_id}")
        done = self.api.kubectl("get", "workloadrecovery", name, "-n", self.namespace, "-o", "json")
        return json.loads(done.stdout) if done.returncode == 0 else {}

    @property
    def cluster_name(self) -> str:
        out = self.slurm.scontrol("show", "config")
        match = re.search(r"^ClusterName\s*=\s*(\S+)", out, re.MULTILINE)
        assert match, "no ClusterName in scontrol show config"
        return match.group(1)

    def events_of(self, name: str) -> list[dict[str, Any]]:
        done = op.get_json(self.api, "events", "-n", self.namespace, "--field-selector",
                           f"involvedObject.name={name}")
        items: list[dict[str, Any]] = done.get("items", [])
        return items

    def submit(self, name: str) -> str:
        job_id = self.slurm.submit(JOB_SCRIPT.format(policy=self.policy, name=name))
        self.jobs.append(job_id)
        return job_id

    def first_node(self, job_id: str) -> str:
        path = self.slurm.jobs_dir / f"attempts-{job_id}.txt"  # slurm-<id>.out restarts with each attempt
        match = re.search(r"start restarts=0 on (\S+)", path.read_text())
        assert match, path.read_text()
        return match.group(1)


def policy_yaml(name: str, namespace: str, mode: str) -> str:
    return (f"apiVersion: trainguard.dev/v1alpha1\nkind: RecoveryPolicy\nmetadata:\n  name: {name}\n"
            f"  namespace: {namespace}\nspec:\n  mode: {mode}\n")


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == type_:
            found: dict[str, Any] = item
            return found
    return {}


@pytest.fixture(scope="module")
def setup(kube_api: kube.LocalKube, slurm_cluster: SlurmCluster,
          tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Setup]:
    op.ok(kube_api.kubectl("apply", "-k", str(REPO_ROOT / "crds")))
    for crd in ("recoverypolicies.trainguard.dev", "workloadrecoveries.trainguard.dev"):
        op.ok(kube_api.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s"))
    base = REPO_ROOT / "manifests" / "base"
    op.ok(kube_api.kubectl("apply", "-f", str(base / "namespace.yaml"), "-f", str(base / "serviceaccount.yaml"),
                           "-f", str(base / "rbac.yaml")))
    namespace = kube.unique_name("tg-e2e")
    op.ok(kube_api.kubectl("create", "namespace", namespace))
    policy = f"e2e-{secrets.token_hex(4)}"
    op.ok(kube_api.kubectl("apply", "-f", "-", input=policy_yaml(policy, namespace, "Monitor")))

    directory = tmp_path_factory.mktemp("operator")
    sa_kubeconfig = kube_api.service_account_kubeconfig(SERVICE_ACCOUNT, OPERATOR_NS, directory / "kubeconfig")
    process = op.OperatorProcess(
        ["--scheduler", "slurm-local", "--namespace", namespace, "--mode", "action", "--poll", "1",
         "--status-interval", "1", "--db", f"sqlite+aiosqlite:///{directory / 'audit.db'}"],
        op.operator_env(sa_kubeconfig, slurm_cluster.env, directory),
        directory / "operator.log",
    )
    process.start()
    result = Setup(kube_api, slurm_cluster, namespace, policy, process, sa_kubeconfig)
    try:
        yield result
    finally:
        code = process.stop()
        if code != 0 or request.session.testsfailed:
            print(result.diagnose())
        kube_api.kubectl("delete", "namespace", namespace, "--wait=false")
        assert code == 0, f"operator exited with {code}\n{result.diagnose()}"


def accepted(setup: Setup, generation: int) -> bool:
    obj = op.get_json(setup.api, "recoverypolicy", setup.policy, "-n", setup.namespace)
    cond = condition(obj, "Accepted")
    return cond.get("status") == "True" and cond.get("observedGeneration") == generation


def test_monitor_mode_reports_anomaly_and_advice_and_leaves_slurm_unchanged(setup: Setup) -> None:
    op.poll("Accepted=True on the policy", lambda: accepted(setup, 1), 90, setup.diagnose)
    job_id = setup.submit("tg-kube-monitor")
    setup.slurm.wait_for(job_id, "FAILED", timeout=WAIT_S, fail_fast=False)

    def advised() -> dict[str, Any]:
        obj = setup.recovery(job_id)
        st = obj.get("status") or {}
        return obj if (st.get("advice") or {}).get("disposition") == "Monitored" else {}

    obj = op.poll("Monitored advice in WorkloadRecovery status", advised, WAIT_S, setup.diagnose)
    st = obj["status"]
    node = setup.first_node(job_id)
    assert obj["spec"]["workload"] == {"kind": "SlurmJob", "cluster": setup.cluster_name, "id": job_id}
    assert obj["status"]["policy"] == setup.policy and "policy" not in obj["spec"]
    assert st["lastAnomaly"]["category"] == "gpu_fallen_off_bus"
    assert st["lastAnomaly"]["verdict"] == "hardware"
    assert st["lastAnomaly"]["nodes"] == [node]
    assert (st["advice"]["action"], st["advice"]["mode"], st["advice"]["excludeNodes"]) == (
        "requeue", "Monitor", [node])
    assert st["phase"] == "Failed"
    assert condition(obj, "Converged")["reason"] == "AdviceRecorded"

    name = obj["metadata"]["name"]
    reasons = op.poll("Events on the WorkloadRecovery",
                      lambda: {e["reason"] for e in setup.events_of(name)} >= {"AnomalyDetected", "AdviceRecorded"}
                      and {e["reason"] for e in setup.events_of(name)}, 30, setup.diagnose)
    assert "RecoveryStarted" not in reasons

    job = setup.slurm.show(job_id)
    assert (job["JobState"], job["Restarts"], job.get("ExcNodeList", "(null)")) == ("FAILED", "0", "(null)")


def test_switch_to_action_takes_effect_without_restart(setup: Setup) -> None:
    pid = setup.process.pid
    op.ok(setup.api.kubectl("patch", "recoverypolicy", setup.policy, "-n", setup.namespace, "--type", "merge",
                            "-p", '{"spec":{"mode":"Action"}}'))
    op.poll("Accepted=True for generation 2", lambda: accepted(setup, 2), 60, setup.diagnose)
    job_id = setup.submit("tg-kube-action")
    job = setup.slurm.wait_for(job_id, lambda j: j.get("JobState") == "COMPLETED" and j.get("Restarts") == "1",
                               timeout=WAIT_S, fail_fast=False)
    node = setup.first_node(job_id)
    assert job["ExcNodeList"] == node
    assert node not in job["NodeList"]

    def converged() -> dict[str, Any]:
        obj = setup.recovery(job_id)
        st = obj.get("status") or {}
        return obj if st.get("phase") == "Succeeded" and (st.get("advice") or {}).get("disposition") == "Converged" \
            else {}

    obj = op.poll("Succeeded + Converged in status", converged, WAIT_S, setup.diagnose)
    assert obj["status"]["advice"]["mode"] == "Action"
    assert obj["status"]["restarts"] == 1
    assert obj["status"]["attempt"] == 2
    steps = {(a["operation"], a["status"]) for a in obj["status"]["recentActions"]}
    assert {("requeue_hold", "done"), ("exclude_nodes", "done"), ("release", "done")} <= steps, steps
    name = obj["metadata"]["name"]
    op.poll("RecoveryStarted and RecoveryConverged Events",
            lambda: {e["reason"] for e in setup.events_of(name)} >= {"RecoveryStarted", "RecoveryConverged"},
            30, setup.diagnose)
    assert setup.process.alive() and setup.process.pid == pid, "the operator was restarted"


def test_kubectl_get_recoveries_prints_the_printer_columns(setup: Setup) -> None:
    out = op.ok(setup.api.kubectl("get", "recoveries", "-n", setup.namespace))
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "WORKLOAD", "PHASE", "ATTEMPT", "LAST", "ANOMALY", "VERDICT", "ADVICE", "MODE",
                              "LAST", "STEP", "AGE"]
    cells = {row.split()[1]: row.split() for row in rows if row.split()[1] in setup.jobs}
    assert len(cells) == 2 == len(setup.jobs), out
    assert all(cell[2] in {"Failed", "Succeeded"} for cell in cells.values()), out
    assert {cell[4] for cell in cells.values()} == {"gpu_fallen_off_bus"}, out


def test_schema_rejects_bad_values_before_the_operator_sees_them(setup: Setup) -> None:
    bad = policy_yaml(f"bad-{secrets.token_hex(3)}", setup.namespace, "Sometimes")
    done = setup.api.kubectl("apply", "-f", "-", input=bad)
    assert done.returncode != 0
    assert "spec.mode" in done.stderr and "Unsupported value" in done.stderr, done.stderr


def test_non_portable_pattern_gets_an_invalid_condition(setup: Setup) -> None:
    name = f"lookahead-{secrets.token_hex(3)}"
    doc = policy_yaml(name, setup.namespace, "Monitor") + (
        "  detection:\n    extraPatterns:\n"
        "    - id: site.lookahead\n      category: nccl_error\n      attribution_hint: system\n"
        "      severity: error\n      regex: 'NCCL(?=WARN)'\n      examples: ['NCCLWARN x']\n"
    )
    op.ok(setup.api.kubectl("apply", "-f", "-", input=doc))  # the schema cannot say "portable regex"

    def invalid() -> dict[str, Any]:
        obj = op.get_json(setup.api, "recoverypolicy", name, "-n", setup.namespace)
        return condition(obj, "Invalid") if condition(obj, "Invalid").get("status") == "True" else {}

    cond = op.poll("Invalid=True on the policy", invalid, 60, setup.diagnose)
    assert cond["reason"] == "ValidationFailed"
    assert "spec.detection.extraPatterns.0.regex" in cond["message"] and "not portable" in cond["message"], cond
    assert setup.process.alive()


def test_status_writer_absorbs_a_real_409_from_a_stale_resource_version(setup: Setup, tmp_path: Path) -> None:
    name = f"conflict-{secrets.token_hex(3)}"
    body = {
        "apiVersion": "trainguard.dev/v1alpha1", "kind": "WorkloadRecovery",
        "metadata": {"name": name, "namespace": setup.namespace},
        "spec": {"workload": {"kind": "SlurmJob", "id": "424242"}},
    }
    op.ok(setup.api.kubectl("create", "-f", "-", input=json.dumps(body)))
    stale = op.get_json(setup.api, "workloadrecovery", name, "-n", setup.namespace)
    # A concurrent writer: the object changes after we read it (new resourceVersion).
    op.ok(setup.api.kubectl("label", "workloadrecovery", name, "-n", setup.namespace, "touched=yes"))
    view = status.WorkloadView(
        workload="slurm/x/424242",
        job=workloads.JobSnapshot(workload="slurm/x/424242", job_id="424242", state=workloads.JobState.RUNNING),
        policy_name=setup.policy, mode=vocab.Mode.MONITOR,
    )

    async def write() -> tuple[bool, status_write.SyncStats]:
        stats = status_write.SyncStats()
        async with await k8s_client.load_api_client(str(setup.api.kubeconfig)) as client:
            with pytest.raises(k8s_client.ApiException) as raw:  # the real server's answer to a stale write
                await k8s.CustomObjectsApi(client).patch_namespaced_custom_object_status(
                    recovery.GROUP, recovery.VERSION, setup.namespace, recovery.PLURAL, name,
                    {"metadata": {"resourceVersion": stale["metadata"]["resourceVersion"]}, "status": {"attempt": 7}},
                    _content_type=k8s_client.MERGE_PATCH)
            assert k8s_client.is_conflict(raw.value)
            wrote = await status_write.sync_status(client, setup.namespace, name, view, observed=stale, stats=stats,
                                             now=datetime.datetime.now(datetime.UTC))
        return wrote, stats

    wrote, stats = asyncio.run(write())
    assert wrote and stats.conflicts == 1 and stats.patches == 1
    obj = op.get_json(setup.api, "workloadrecovery", name, "-n", setup.namespace)
    assert obj["status"]["phase"] == "Running" and obj["status"]["attempt"] == 1
    assert obj["metadata"]["labels"]["touched"] == "yes"


def test_slurm_client_commands_authenticate_with_the_clusters_jwt(setup: Setup) -> None:
    """The scontrol-with-JWT path (Slinky): with SLURM_JWT set, the client authenticates by JWT, so a
    forged token is refused while the cluster's token works."""
    env = op.operator_env(setup.sa_kubeconfig, setup.slurm.env, Path("/tmp"))
    good = subprocess.run(["scontrol", "show", "config"], env=env, capture_output=True, text=True, timeout=30,
                          check=False)
    assert good.returncode == 0, good.stderr
    forged = {**env, "SLURM_JWT": env["SLURM_JWT"][:-4] + "AAAA"}
    bad = subprocess.run(["scontrol", "show", "config"], env=forged, capture_output=True, text=True, timeout=30,
                         check=False)
    assert bad.returncode != 0, "a forged SLURM_JWT was accepted: the client did not use JWT auth"


def test_operator_serves_liveness_readiness_and_metrics(setup: Setup) -> None:
    """The probes of manifests/base hit these: /healthz (the event loop's heartbeat), /readyz (the
    scheduler and the audit store answered), /metrics; the address is the one the log names."""
    url = op.poll("the HTTP address in the operator log",
                  lambda: (m := re.search(r"HTTP endpoints on (http://\S+) ", setup.process.tail(400))) and m.group(1),
                  30, setup.diagnose)

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url + path, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    assert get("/healthz")[0] == 200
    op.poll("/readyz 200", lambda: get("/readyz")[0] == 200, WAIT_S, setup.diagnose)
    ready = json.loads(get("/readyz")[1])
    assert ready["scheduler"]["reachable"] is True and ready["store"]["reachable"] is True, ready
    status, metrics = get("/metrics")
    assert status == 200
    assert 'trainguard_dependency_reachable{dependency="scheduler"} 1.0' in metrics
