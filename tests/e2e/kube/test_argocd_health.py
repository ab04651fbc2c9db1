"""End to end: Argo CD's health checks and GitOps cleanliness on objects the real operator wrote.

The real ``trainguard operator`` (ServiceAccount of ``manifests/base``) serves a fresh namespace on
the real kube-apiserver with the real local Slurm cluster. RecoveryPolicies are applied as a GitOps
tool applies them (``kubectl apply --server-side`` with a field manager of their own); Slurm jobs
drive WorkloadRecoveries through their states. Each state's object is read back from the server and
evaluated live with ``deploy/argocd/health/.../health.lua`` in Lua 5.1 (``tests/support/argocd.py``):

- RecoveryPolicy: Action and Accepted -> Healthy; Monitor -> Healthy (advice only); a non-portable pattern ->
  Degraded; a spec edited while the operator is down (status of an older generation) -> Progressing;
- WorkloadRecovery: a job that failed in Monitor mode -> Degraded; a job requeued without its bad
  node that then completed -> Healthy; a job its owner holds (``sbatch --hold``) -> Suspended; its
  spec edited while the operator is down -> Progressing.

GitOps: the operator never changes a spec (byte for byte, generation unchanged), its managedFields
entries never own ``f:spec`` of a RecoveryPolicy, and ``kubectl diff --server-side`` of the applied
manifests stays empty after the operator has written status.

``TG_ARGOCD_WRITE_FIXTURES=1`` stores the objects as Argo CD test fixtures (``testdata/`` and
``health_test.yaml``), which ``tests/unit/argocd`` replays without a server.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.kube import operator_process as op
from tests.e2e.kube.test_operator import JOB_SCRIPT, OPERATOR_NS, SERVICE_ACCOUNT, WAIT_S, condition
from tests.support import argocd, kube
from tests.support.slurm import SlurmCluster
from trainguard.k8s import status

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.slurm, pytest.mark.timeout(900)]

REPO_ROOT = Path(__file__).resolve().parents[3]
MANAGER = "gitops-e2e"
"""The field manager the test applies with, standing in for Argo CD or Flux."""
WRITE_FIXTURES = os.environ.get("TG_ARGOCD_WRITE_FIXTURES") == "1"
_SUFFIX = secrets.token_hex(3)
MONITOR, ACTION, INVALID = f"argocd-monitor-{_SUFFIX}", f"argocd-action-{_SUFFIX}", f"argocd-invalid-{_SUFFIX}"
"""Policy names: Slurm jobs select policies by name, so they are unique per session."""


@dataclasses.dataclass
class Run:
    api: kube.LocalKube
    slurm: SlurmCluster
    namespace: str
    process: op.OperatorProcess
    manifests: dict[str, str] = dataclasses.field(default_factory=dict)
    """Policy name -> the YAML applied for it."""
    applied_spec: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Object name -> its spec right after apply (server defaults included), for the drift check."""
    captured: dict[str, list[tuple[str, dict[str, Any], argocd.Health]]] = dataclasses.field(default_factory=dict)
    """Kind -> (state name, object, health) for the fixtures."""
    succeeded: str = ""
    """Name of the WorkloadRecovery of the job that was requeued and completed."""

    def diagnose(self) -> str:
        return f"--- operator log ---\n{self.process.tail()}"

    def get(self, kind: str, name: str) -> dict[str, Any]:
        return op.get_json(self.api, kind, name, "-n", self.namespace, "--show-managed-fields")

    def apply(self, name: str, document: str) -> None:
        self.manifests[name] = document
        op.ok(self.api.kubectl("apply", "--server-side", f"--field-manager={MANAGER}", "-f", "-", input=document))
        self.applied_spec[name] = self.get("recoverypolicy", name)["spec"]

    def capture(self, kind: str, state: str, obj: dict[str, Any]) -> argocd.Health:
        health = argocd.evaluate(kind, obj)
        self.captured.setdefault(kind, []).append((state, obj, health))
        return health


def policy_yaml(name: str, namespace: str, mode: str, extra: str = "") -> str:
    return (f"apiVersion: trainguard.dev/v1alpha1\nkind: RecoveryPolicy\nmetadata:\n  name: {name}\n"
            f"  namespace: {namespace}\nspec:\n  mode: {mode}\n{extra}")


class Watch:
    """``kubectl get -w -o json`` of the namespace's WorkloadRecoveries: every version the server stores,
    so a short-lived phase (Recovering lasts a few seconds) is seen without polling for it."""

    def __init__(self, api: kube.LocalKube, namespace: str) -> None:
        self.seen: list[dict[str, Any]] = []
        self.proc = subprocess.Popen(
            [str(api.kubectl_path), "get", "workloadrecoveries", "-n", namespace, "-w", "-o", "json"],
            env={**os.environ, "KUBECONFIG": str(api.kubeconfig)}, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
        )
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        decoder, buffer = json.JSONDecoder(), ""
        for line in self.proc.stdout:
            buffer += line
            try:
                obj, end = decoder.raw_decode(buffer.lstrip())
            except ValueError:
                continue
            self.seen.append(obj)
            buffer = buffer.lstrip()[end:]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.thread.join(timeout=30)


def write_fixtures(run: Run) -> None:
    """testdata/<state>.yaml and health_test.yaml per kind, in Argo CD's resource_customizations layout."""
    for kind, items in run.captured.items():
        directory = argocd.script_path(kind).parent
        (directory / "testdata").mkdir(exist_ok=True)
        for stale in (directory / "testdata").glob("*.yaml"):
            stale.unlink()
        tests = []
        for state, obj, health in items:
            path = directory / "testdata" / f"{state}.yaml"
            path.write_text(yaml.safe_dump(argocd.fixture_object(obj), sort_keys=False))
            tests.append({"healthStatus": {"status": health.status, "message": health.message},
                          "inputPath": f"testdata/{state}.yaml"})
        (directory / "health_test.yaml").write_text(yaml.safe_dump({"tests": tests}, sort_keys=False))


@pytest.fixture(scope="module")
def run(kube_api: kube.LocalKube, slurm_cluster: SlurmCluster,
        tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Run]:
    op.ok(kube_api.kubectl("apply", "-k", str(REPO_ROOT / "crds")))
    for crd in ("recoverypolicies.trainguard.dev", "workloadrecoveries.trainguard.dev"):
        op.ok(kube_api.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s"))
    base = REPO_ROOT / "manifests" / "base"
    op.ok(kube_api.kubectl("apply", "-f", str(base / "namespace.yaml"), "-f", str(base / "serviceaccount.yaml"),
                           "-f", str(base / "rbac.yaml")))
    namespace = kube.unique_name("tg-argocd")
    op.ok(kube_api.kubectl("create", "namespace", namespace))
    directory = tmp_path_factory.mktemp("operator")
    sa_kubeconfig = kube_api.service_account_kubeconfig(SERVICE_ACCOUNT, OPERATOR_NS, directory / "kubeconfig")
    process = op.OperatorProcess(
        ["--scheduler", "slurm-local", "--namespace", namespace, "--mode", "action", "--poll", "1",
         "--status-interval", "1", "--db", f"sqlite+aiosqlite:///{directory / 'audit.db'}"],
        op.operator_env(sa_kubeconfig, slurm_cluster.env, directory),
        directory / "operator.log",
    )
    result = Run(kube_api, slurm_cluster, namespace, process)
    result.apply(MONITOR, policy_yaml(MONITOR, namespace, "Monitor"))
    result.apply(ACTION, policy_yaml(ACTION, namespace, "Action"))
    process.start()
    try:
        yield result
    finally:
        code = process.stop()
        if code not in (0, None) or request.session.testsfailed:
            print(result.diagnose())
        if WRITE_FIXTURES and not request.session.testsfailed:
            write_fixtures(result)
        kube_api.kubectl("delete", "namespace", namespace, "--wait=false")
        assert code in (0, None), f"operator exited with {code}\n{result.diagnose()}"


def ready_for(run: Run, name: str, generation: int) -> dict[str, Any]:
    obj = run.get("recoverypolicy", name)
    ready = condition(obj, "Ready")
    return obj if ready.get("observedGeneration") == generation and ready.get("status") in ("True", "False") \
        else {}


def test_policies_health_and_ready_condition(run: Run) -> None:
    action = op.poll("Ready on the Action policy", lambda: ready_for(run, ACTION, 1), 90, run.diagnose)
    monitor = op.poll("Ready on the Monitor policy", lambda: ready_for(run, MONITOR, 1), 90, run.diagnose)
    for obj in (action, monitor):
        ready = condition(obj, "Ready")
        assert (ready["status"], ready["reason"]) == ("True", "Valid"), ready
        assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"] == 1
    assert run.capture("RecoveryPolicy", "healthy", action).status == "Healthy"
    assert run.capture("RecoveryPolicy", "healthy-monitor", monitor) == argocd.Health(
        "Healthy", "Monitor mode: advice is recorded, nothing is carried out")

    run.apply(INVALID, policy_yaml(INVALID, run.namespace, "Action", (
        "  detection:\n    extraPatterns:\n"
        "    - id: site.lookahead\n      category: nccl_error\n      attribution_hint: system\n"
        "      severity: error\n      regex: 'NCCL(?=WARN)'\n      examples: ['NCCLWARN x']\n")))
    invalid = op.poll("Ready on the invalid policy", lambda: ready_for(run, INVALID, 1), 90, run.diagnose)
    ready = condition(invalid, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ValidationFailed"), ready
    health = run.capture("RecoveryPolicy", "degraded", invalid)
    assert health.status == "Degraded" and "not portable" in health.message, health


def test_workload_recoveries_health(run: Run) -> None:
    """Monitor: a failed job is Degraded; Action: the requeued job that completed is Healthy."""
    watch = Watch(run.api, run.namespace)
    failed = run.slurm.submit(JOB_SCRIPT.format(policy=MONITOR, name="tg-argocd-monitor"))
    requeued = run.slurm.submit(JOB_SCRIPT.format(policy=ACTION, name="tg-argocd-action"))
    cluster = run.slurm.scontrol("show", "config").split("ClusterName", 1)[1].split("=", 1)[1].split()[0]

    def recovery(job_id: str) -> dict[str, Any]:
        name = status.object_name(f"slurm/{cluster}/{job_id}")
        done = run.api.kubectl("get", "workloadrecovery", name, "-n", run.namespace, "-o", "json",
                               "--show-managed-fields")
        return json.loads(done.stdout) if done.returncode == 0 else {}

    def monitored() -> dict[str, Any]:
        obj = recovery(failed)
        return obj if ((obj.get("status") or {}).get("advice") or {}).get("disposition") == "Monitored" else {}

    obj = op.poll("Monitored advice on the failed job", monitored, WAIT_S, run.diagnose)
    ready = condition(obj, "Ready")
    assert (obj["status"]["phase"], ready["status"], ready["reason"]) == ("Failed", "False", "WorkloadFailed"), ready
    assert ready["observedGeneration"] == obj["metadata"]["generation"] == obj["status"]["observedGeneration"]
    health = run.capture("WorkloadRecovery", "degraded", obj)
    assert health.status == "Degraded" and "WorkloadFailed" in health.message, health

    def succeeded() -> dict[str, Any]:
        obj = recovery(requeued)
        st = obj.get("status") or {}
        return obj if st.get("phase") == "Succeeded" and (st.get("advice") or {}).get("disposition") == "Converged" \
            else {}

    obj = op.poll("Succeeded + Converged on the requeued job", succeeded, WAIT_S, run.diagnose)
    ready = condition(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "WorkloadHealthy"), ready
    assert obj["status"]["restarts"] == 1
    assert run.capture("WorkloadRecovery", "healthy", obj).status == "Healthy"
    run.succeeded = obj["metadata"]["name"]
    # While the requeue was carried out the phase was Recovering. The status writer runs every second,
    # so on a fast machine the whole recovery can fall between two writes: checked when it was stored.
    watch.stop()
    recovering = [o for o in watch.seen if o["metadata"]["name"] == run.succeeded
                  and (o.get("status") or {}).get("phase") == "Recovering"]
    if recovering:
        ready = condition(recovering[0], "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "RecoveryInProgress"), ready
        assert run.capture("WorkloadRecovery", "progressing-recovering", recovering[0]) == argocd.Health(
            "Progressing", "Recovering: attempt " + str(recovering[0]["status"]["attempt"]))

    # GitOps: the operator created these objects and then only wrote status: spec never changed.
    for item in (recovery(failed), recovery(requeued)):
        assert item["metadata"]["generation"] == 1, item["metadata"]
        assert set(item["spec"]) == {"workload", "overrides"} and item["spec"]["overrides"] == {}, item["spec"]
        for entry in item["metadata"]["managedFields"]:
            owned = set(entry.get("fieldsV1") or {})
            if entry.get("subresource") == "status":
                assert owned <= {"f:status"}, entry
            else:  # the create: its own object, metadata and spec, never status
                assert "f:status" not in owned, entry
    assert run.slurm.show(requeued).get("JobState") == "COMPLETED"


def test_a_held_job_is_suspended(run: Run) -> None:
    """A job held by its owner (``sbatch --hold``) waits for a person: Ready=False WorkloadHeld, Suspended."""
    job_id = run.slurm.submit(JOB_SCRIPT.format(policy=ACTION, name="tg-argocd-held"), "--hold")
    try:
        cluster = run.slurm.scontrol("show", "config").split("ClusterName", 1)[1].split("=", 1)[1].split()[0]
        name = status.object_name(f"slurm/{cluster}/{job_id}")

        def held() -> dict[str, Any]:
            done = run.api.kubectl("get", "workloadrecovery", name, "-n", run.namespace, "-o", "json")
            obj: dict[str, Any] = json.loads(done.stdout) if done.returncode == 0 else {}
            return obj if (obj.get("status") or {}).get("phase") == "Held" else {}

        obj = op.poll("phase Held on the held job", held, WAIT_S, run.diagnose)
        ready = condition(obj, "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "WorkloadHeld"), ready
        assert run.capture("WorkloadRecovery", "suspended", obj) == argocd.Health(
            "Suspended", "Held: the job waits for a release")
    finally:
        run.slurm.cancel(job_id)  # never leave a job held


def test_operator_never_touches_a_policy_spec_and_apply_shows_no_diff(run: Run) -> None:
    for name in (ACTION, MONITOR, INVALID):
        obj = op.poll(f"status on {name}", lambda n=name: ready_for(run, n, 1), 90, run.diagnose)
        assert obj["metadata"]["generation"] == 1
        assert json.dumps(obj["spec"], sort_keys=True) == json.dumps(run.applied_spec[name], sort_keys=True)
        managers = {entry["manager"]: entry for entry in obj["metadata"]["managedFields"]}
        assert MANAGER in managers and "f:spec" in managers[MANAGER]["fieldsV1"]
        for manager, entry in managers.items():
            if manager != MANAGER:  # the operator: status (and kopf's own metadata), never spec
                assert "f:spec" not in (entry.get("fieldsV1") or {}), entry
        diff = run.api.kubectl("diff", "--server-side", f"--field-manager={MANAGER}", "-f", "-",
                               input=run.manifests[name])
        assert (diff.returncode, diff.stdout) == (0, ""), f"drift on {name}: {diff.stdout}{diff.stderr}"


def test_a_spec_edit_the_operator_has_not_read_is_progressing(run: Run) -> None:
    """With the operator down, a new generation of each kind is Progressing until it is read."""
    assert run.process.stop() == 0, run.diagnose()
    op.ok(run.api.kubectl("patch", "recoverypolicy", ACTION, "-n", run.namespace, "--type", "merge",
                          "-p", '{"spec":{"retries":{"maxRetries":2}}}'))
    obj = run.get("recoverypolicy", ACTION)
    assert (obj["metadata"]["generation"], obj["status"]["observedGeneration"]) == (2, 1)
    assert run.capture("RecoveryPolicy", "progressing", obj) == argocd.Health(
        "Progressing", "Waiting for the Trainguard operator to read generation 2")

    name = run.succeeded
    assert name, "test_workload_recoveries_health did not leave a Succeeded WorkloadRecovery"
    op.ok(run.api.kubectl("patch", "workloadrecovery", name, "-n", run.namespace, "--type", "merge",
                          "-p", '{"spec":{"overrides":{"maxRetries":1}}}'))
    obj = run.get("workloadrecovery", name)
    assert (obj["metadata"]["generation"], obj["status"]["observedGeneration"]) == (2, 1)
    assert run.capture("WorkloadRecovery", "progressing", obj) == argocd.Health(
        "Progressing", "Waiting for the Trainguard operator to read generation 2")
