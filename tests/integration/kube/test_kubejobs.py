"""The Kubernetes workload adapter against a real kube-apiserver with the upstream JobSet and
PyTorchJob CRDs, as the operator's ServiceAccount bound to the shipped RBAC (manifests/base plus
manifests/kubernetes).

There is no controller here (no JobSet controller, scheduler or kubelet): the tests write the
pods and the status fields those controllers would write, then check what the adapter reads
(discovery by watch, rank <-> pod <-> node, attempt, exit code) and what it changes (suspend
through the spec, cordon + our taint, lifting only our own). The controllers' reactions are the
e2e tier's (simulated cluster).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kube import LocalKube, unique_name
from tests.support.kubejobs import install_workload_crds
from trainguard import settings as settings_mod
from trainguard.act import executor
from trainguard.k8s import client, operator
from trainguard.k8s.kubejobs import common, nodes, scheduler
from trainguard.model import advice, clock, vocab, workloads
from trainguard.schedulers import base
from trainguard.store import database

pytestmark = [pytest.mark.integration, pytest.mark.kube]

REPO = Path(__file__).resolve().parents[3]
PERSON_TAINT = {"key": "example.com/maintenance", "value": "disk", "effect": "NoSchedule"}


def ok(kube: LocalKube, *args: str, input: str | None = None) -> str:
    done = kube.kubectl(*args, input=input)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def status_patch(kube: LocalKube, resource: str, name: str, namespace: str | None, status: dict[str, Any]) -> None:
    args = ["patch", resource, name, "--subresource=status", "--type=merge", "-p", json.dumps({"status": status})]
    ok(kube, *args, *(["-n", namespace] if namespace else []))


def shipped_rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for path in (REPO / "manifests/base/rbac.yaml", REPO / "manifests/kubernetes/rbac.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "ClusterRole" and doc["metadata"]["name"] != "trainguard-slinky-pods":
                rules.extend(doc["rules"])
    return rules


async def until(check: Callable[[], Awaitable[bool]], what: str, within_s: float = 60.0) -> None:
    """Wait on a condition (the watch delivers in its own time), failing after ``within_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not await check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


@dataclass
class World:
    kube: LocalKube
    ns: str
    nodes: list[str]
    adapter: scheduler.KubeScheduler

    def jobset(self, name: str, *, policy: str | None = "gpu", max_restarts: int = 3) -> str:
        notes = {"trainguard.dev/policy": policy} if policy is not None else {}
        ok(self.kube, "apply", "-f", "-", input=yaml.safe_dump({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": self.ns, "annotations": notes, "labels": {"team": "vision"}},
            "spec": {"failurePolicy": {"maxRestarts": max_restarts}, "replicatedJobs": [
                {"name": rjob, "replicas": 1, "template": {"spec": {"parallelism": 2, "completions": 2,
                 "completionMode": "Indexed", "template": {"spec": {"restartPolicy": "Never",
                                                                    "containers": [{"name": "train", "image": "x"}]}}}}}
                for rjob in ("leaders", "workers")]},
        }))
        return common.workload_id(self.ns, "JobSet", name)

    def pod(self, name: str, node: str, labels: dict[str, str], phase: str = "Running",
            terminated: dict[str, Any] | None = None) -> None:
        ok(self.kube, "apply", "-f", "-", input=yaml.safe_dump({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.ns, "labels": labels},
            "spec": {"nodeName": node, "automountServiceAccountToken": False,
                     "containers": [{"name": "train", "image": "x",
                                     "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
        }))
        state: dict[str, Any] = {"terminated": terminated} if terminated else {"running": {}}
        status_patch(self.kube, "pod", name, self.ns, {
            "phase": phase, "startTime": "2026-12-01T10:00:00Z",
            "containerStatuses": [{"name": "train", "image": "x", "imageID": "", "ready": phase == "Running",
                                   "restartCount": 0, "state": state}]})

    def jobset_pods(self, jobset_name: str, node_of: dict[tuple[str, int], str], attempt: int = 0) -> None:
        for (rjob, index), node in node_of.items():
            self.pod(f"{jobset_name}-{rjob}-0-{index}-a{attempt}", node, {
                "jobset.sigs.k8s.io/jobset-name": jobset_name, "jobset.sigs.k8s.io/replicatedjob-name": rjob,
                "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-completion-index": str(index),
                "jobset.sigs.k8s.io/restart-attempt": str(attempt)})

    def node(self, name: str) -> dict[str, Any]:
        return json.loads(ok(self.kube, "get", "node", name, "-o", "json"))

    async def in_cache(self, wid: str, tasks: int = 4) -> None:
        """Wait until the adapter's watch cache lists the workload with its ``tasks`` pods."""

        async def tracked() -> bool:
            return any(j.workload == wid and j.num_tasks == tasks for j in await self.adapter.list_jobs())

        await until(tracked, "the JobSet in the watch cache")


@pytest.fixture
async def world(kube_api: LocalKube, tmp_path: Path) -> AsyncIterator[World]:
    if kube_api.kubectl("get", "node", "kwok-node-1").returncode == 0:
        # The simulated cluster's controllers would act on these hand-written objects (the JobSet
        # controller creates its own pods, the node lifecycle controller evicts from nodes without a
        # kubelet); its real behaviour is tested in tests/e2e/kube_cluster instead.
        pytest.skip("needs the API without controllers (hack/local-kube.sh up, not up --cluster)")
    install_workload_crds(kube_api)
    ns, sa = unique_name("tg-kj"), "trainguard"
    role = unique_name("tg-kubejobs")
    ok(kube_api, "create", "namespace", ns)
    ok(kube_api, "create", "serviceaccount", sa, "-n", ns)
    ok(kube_api, "apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
         "rules": shipped_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
         "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]},
    ]))
    names = [f"{ns}-node-{i}" for i in range(1, 5)]
    for name in names:
        ok(kube_api, "apply", "-f", "-", input=yaml.safe_dump({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"type": "kwok"}},
            "spec": {}}))
        status_patch(kube_api, "node", name, None, {
            "capacity": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready",
                            "lastHeartbeatTime": "2026-12-01T10:00:00Z",
                            "lastTransitionTime": "2026-12-01T10:00:00Z"}]})
    config = kube_api.service_account_kubeconfig(sa, ns, tmp_path / "operator.kubeconfig")
    adapter = scheduler.KubeScheduler(await client.load_api_client(str(config)), namespaces=(ns,))
    adapter.start()
    try:
        yield World(kube_api, ns, names, adapter)
    finally:
        await adapter.close()
        for name in names:
            kube_api.kubectl("delete", "node", name, "--wait=false")
        kube_api.kubectl("delete", "clusterrolebinding,clusterrole", role, "--wait=false")


def layout(w: World) -> dict[tuple[str, int], str]:
    n1, n2, n3, n4 = w.nodes
    return {("leaders", 0): n1, ("leaders", 1): n2, ("workers", 0): n3, ("workers", 1): n4}


async def test_discovery_by_watch_maps_only_opted_in_jobsets_with_ranks_nodes_and_attempt(world: World) -> None:
    w = world
    wid = w.jobset("train")
    other = w.jobset("not-mine", policy=None)
    w.jobset_pods("train", {("workers", 1): w.nodes[3], ("leaders", 1): w.nodes[1],
                            ("workers", 0): w.nodes[2], ("leaders", 0): w.nodes[0]})
    w.jobset_pods("not-mine", {("leaders", 0): w.nodes[0]})

    async def seen() -> bool:
        return any(j.workload == wid and j.num_tasks == 4 for j in await w.adapter.list_jobs())

    await until(seen, "the JobSet and its four pods in the watch cache")
    jobs = {j.workload: j for j in await w.adapter.list_jobs()}
    assert other not in jobs
    job = jobs[wid]
    assert job.job_id == wid and job.name == "train"
    assert job.nodes == w.nodes  # rank order: leaders 0,1 then workers 0,1
    assert job.state is workloads.JobState.RUNNING and job.attempt == 0 and not job.held
    assert job.comment == "trainguard policy=gpu"
    assert job.namespace == w.ns and job.labels == {"team": "vision"}
    assert job.stdout_path == f"k8s://{w.ns}/JobSet/train" and job.stderr_path is None

    # node 2's pod fails (Xid 79: the GPU fell off the bus), and the JobSet controller restarts it
    w.pod("train-leaders-0-1-a0", w.nodes[1], {
        "jobset.sigs.k8s.io/jobset-name": "train", "jobset.sigs.k8s.io/replicatedjob-name": "leaders",
        "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-completion-index": "1"},
        phase="Failed", terminated={"exitCode": 79, "reason": "Error", "startedAt": "2026-12-01T10:00:00Z",
                                    "finishedAt": "2026-12-01T10:01:00Z"})
    fresh = await w.adapter.get_job(wid)
    assert (fresh.exit_code, fresh.reason) == (79, "Error")
    with pytest.raises(base.JobGone):  # never created (deleted, for the engine): gone, not an empty object
        await w.adapter.get_job(common.workload_id(w.ns, "JobSet", "never-created"))
    status_patch(w.kube, "jobset", "train", w.ns, {"restarts": 1})
    assert (await w.adapter.get_job(wid)).attempt == 1

    async def restarted() -> bool:
        return any(j.workload == wid and j.attempt == 1 for j in await w.adapter.list_jobs())

    await until(restarted, "the restart in the watch cache")


async def test_exclusion_is_cordon_plus_our_taint_and_only_ours_is_lifted(world: World) -> None:
    w = world
    wid = w.jobset("train")
    w.jobset_pods("train", layout(w))
    _, n2, n3, n4 = w.nodes
    ok(w.kube, "patch", "node", n2, "--type=merge", "-p", json.dumps({"spec": {"taints": [PERSON_TAINT]}}))
    ok(w.kube, "cordon", n3)  # a person's cordon

    await w.in_cache(wid)
    await w.adapter.exclude_nodes(wid, [n2, n3])
    node2 = w.node(n2)
    assert node2["spec"]["unschedulable"] is True
    assert PERSON_TAINT in node2["spec"]["taints"]
    assert {"key": nodes.TAINT_KEY, "value": nodes.taint_value(wid), "effect": "NoExecute"} in node2["spec"]["taints"]
    record = nodes.exclusion_of(node2)
    assert record is not None and record.workload == wid and record.cordoned and record.reason.startswith("trainguard:")
    assert (await w.adapter.get_job(wid)).excluded_nodes == sorted([n2, n3])

    version = node2["metadata"]["resourceVersion"]
    await w.adapter.exclude_nodes(wid, [n2])  # idempotent: already ours, nothing written
    assert w.node(n2)["metadata"]["resourceVersion"] == version

    with pytest.raises(base.SchedulerError, match="not in its allocation"):
        await w.adapter.exclude_nodes(wid, ["some-other-node"])
    with pytest.raises(base.SchedulerError, match="not excluded by trainguard"):
        await w.adapter.resume_node(n4)

    await w.adapter.resume_node(n3)  # our taint goes; the person's cordon stays
    node3 = w.node(n3)
    assert node3["spec"]["unschedulable"] is True and not nodes.has_our_taint(node3)
    assert nodes.exclusion_of(node3) is None

    snapshot = {n.name: n for n in await w.adapter.list_nodes()}[n2]
    assert snapshot.drained and not snapshot.usable and snapshot.reason.startswith("trainguard:")
    record = nodes.exclusion_of(w.node(n2))
    assert record is not None and (record.workload, record.cordoned) == (wid, True)
    await w.adapter.resume_node(n2)  # the lift (act/undrain.py decides when): ours only
    node2 = w.node(n2)
    assert not node2["spec"].get("unschedulable") and node2["spec"]["taints"] == [PERSON_TAINT]
    assert w.node(n3)["spec"]["unschedulable"] is True


async def test_a_not_ready_node_reads_down_so_the_lift_waits(world: World) -> None:
    """act/undrain.py lifts an exclusion only from a node that is up: a node not Ready reads DOWN."""
    w = world
    wid = w.jobset("train")
    w.jobset_pods("train", layout(w))
    n2 = w.nodes[1]

    await w.in_cache(wid)
    await w.adapter.exclude_nodes(wid, [n2])
    status_patch(w.kube, "node", n2, None, {"conditions": [
        {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "GPU fell off the bus",
         "lastHeartbeatTime": "2026-12-01T10:00:00Z", "lastTransitionTime": "2026-12-01T10:00:00Z"}]})
    snapshot = {n.name: n for n in await w.adapter.list_nodes()}[n2]
    assert snapshot.drained and snapshot.state.split("+")[0] == "DOWN"
    assert nodes.has_our_taint(w.node(n2))


async def test_suspend_and_resume_through_the_spec_count_our_restart_and_respect_a_persons_suspend(
        world: World) -> None:
    w = world
    wid = w.jobset("train")
    other = w.jobset("not-mine", policy=None)
    w.jobset_pods("train", layout(w))

    await w.adapter.requeue_hold(wid)
    body = json.loads(ok(w.kube, "get", "jobset", "train", "-n", w.ns, "-o", "json"))
    assert body["spec"]["suspend"] is True and "restarts" not in body.get("status", {})  # spec only
    held = await w.adapter.get_job(wid)
    assert held.held and held.state is workloads.JobState.PENDING and held.attempt == 1
    assert held.hold_detail.startswith("trainguard:")
    await w.adapter.release(wid)
    released = await w.adapter.get_job(wid)
    assert not released.held and released.attempt == 1
    await w.adapter.release(wid)  # idempotent

    await w.adapter.cancel(wid)  # stop = suspend with a reason; nothing is deleted
    assert (await w.adapter.get_job(wid)).state is workloads.JobState.CANCELLED
    assert ok(w.kube, "get", "jobset", "train", "-n", w.ns, "-o", "name").strip()

    with pytest.raises(base.SchedulerError, match=r"no trainguard\.dev/policy annotation"):
        await w.adapter.requeue_hold(other)
    assert not json.loads(ok(w.kube, "get", "jobset", "not-mine", "-n", w.ns, "-o", "json"))["spec"].get("suspend")

    w.jobset("persons")
    pid = common.workload_id(w.ns, "JobSet", "persons")
    ok(w.kube, "patch", "jobset", "persons", "-n", w.ns, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    with pytest.raises(base.SchedulerError, match="someone else"):
        await w.adapter.release(pid)
    assert (await w.adapter.get_job(pid)).held

    w.jobset("spent", max_restarts=1)
    sid = common.workload_id(w.ns, "JobSet", "spent")
    status_patch(w.kube, "jobset", "spent", w.ns, {"restarts": 1, "terminalState": "Failed"})
    with pytest.raises(base.Unsupported, match="not restarted"):
        await w.adapter.requeue_hold(sid)


async def test_pytorchjob_ranks_master_first_and_suspends_through_run_policy(world: World) -> None:
    w = world
    template = {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}
    ok(w.kube, "apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "ptj", "namespace": w.ns, "annotations": {"trainguard.dev/policy": ""}},
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
            "Worker": {"replicas": 2, "restartPolicy": "OnFailure", "template": template}}},
    }))
    wid = common.workload_id(w.ns, "PyTorchJob", "ptj")
    for kind, index, node in (("worker", 1, w.nodes[3]), ("master", 0, w.nodes[0]), ("worker", 0, w.nodes[2])):
        w.pod(f"ptj-{kind}-{index}", node, {"training.kubeflow.org/job-name": "ptj",
                                            "training.kubeflow.org/replica-type": kind,
                                            "training.kubeflow.org/replica-index": str(index)})

    async def seen() -> bool:
        return any(j.workload == wid and j.num_tasks == 3 for j in await w.adapter.list_jobs())

    await until(seen, "the PyTorchJob and its pods in the watch cache")
    job = await w.adapter.get_job(wid)
    assert job.nodes == [w.nodes[0], w.nodes[2], w.nodes[3]] and job.comment == "trainguard"
    await w.adapter.hold(wid)
    body = json.loads(ok(w.kube, "get", "pytorchjob", "ptj", "-n", w.ns, "-o", "json"))
    assert body["spec"]["runPolicy"]["suspend"] is True
    assert (await w.adapter.get_job(wid)).held
    await w.adapter.release(wid)
    assert not (await w.adapter.get_job(wid)).held
    status_patch(w.kube, "pytorchjob", "ptj", w.ns, {"conditions": [
        {"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded", "message": "done"}]})
    assert (await w.adapter.get_job(wid)).state is workloads.JobState.COMPLETED


async def test_a_pytorchjob_pod_re_created_after_the_executors_read_is_not_restarted_a_second_time(
        world: World) -> None:
    """The training-operator re-creates a failed Worker (``restartPolicy: ExitCode``, exit 137)
    within a second: after the executor read the job at attempt 0, before its ``requeue_hold``
    call. The failed pod is gone by then, so nothing shows a restart still to come; the call told
    the attempt it restarts sees the job past it and leaves it alone (no suspend, no restart of
    ours counted). Told no attempt, the same call suspends: the double restart the CI run of
    stop 30 showed on the simulated cluster."""
    w = world
    template = {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}
    for name in ("ptj", "twin"):
        ok(w.kube, "apply", "-f", "-", input=yaml.safe_dump({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": w.ns, "annotations": {"trainguard.dev/policy": ""}},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "ExitCode", "template": template},
                "Worker": {"replicas": 1, "restartPolicy": "ExitCode", "template": template}}},
        }))
    killed = {"exitCode": 137, "reason": "Error", "message": "killed"}
    for name in ("ptj", "twin"):
        wid = common.workload_id(w.ns, "PyTorchJob", name)

        def labels(kind: str, job: str = name) -> dict[str, str]:
            return {"training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-type": kind,
                    "training.kubeflow.org/replica-index": "0"}

        for kind, node in (("master", w.nodes[0]), ("worker", w.nodes[1])):
            w.pod(f"{name}-{kind}-0", node, labels(kind))
        await w.in_cache(wid, tasks=2)
        w.pod(f"{name}-worker-0", w.nodes[1], labels("worker"), phase="Failed", terminated=killed)
        failed = await w.adapter.get_job(wid)  # the executor's last read: the failure, attempt 0
        assert failed.attempt == 0 and failed.state is not workloads.JobState.COMPLETED
        ok(w.kube, "delete", "pod", f"{name}-worker-0", "-n", w.ns, "--wait=true")
        w.pod(f"{name}-worker-0", w.nodes[2], labels("worker"))  # re-created: a new uid

    await w.adapter.requeue_hold(common.workload_id(w.ns, "PyTorchJob", "ptj"), attempt=0)
    body = json.loads(ok(w.kube, "get", "pytorchjob", "ptj", "-n", w.ns, "-o", "json"))
    assert not body["spec"].get("runPolicy", {}).get("suspend")
    assert common.RESTARTS_ANNOTATION not in body["metadata"].get("annotations", {})
    assert (await w.adapter.get_job(common.workload_id(w.ns, "PyTorchJob", "ptj"))).attempt == 1

    await w.adapter.requeue_hold(common.workload_id(w.ns, "PyTorchJob", "twin"))
    twin = json.loads(ok(w.kube, "get", "pytorchjob", "twin", "-n", w.ns, "-o", "json"))
    assert twin["spec"]["runPolicy"]["suspend"] is True
    assert twin["metadata"]["annotations"][common.RESTARTS_ANNOTATION] == "1"


async def test_a_pytorchjob_pod_deleted_for_its_re_creation_is_waited_for_not_restarted_over(world: World) -> None:
    """The training-operator deletes the failed Worker, then creates its successor. A restart step
    that reads the pods in between sees no failure; the failed version the adapter saw tells it the
    workload's own restart is on its way, and it waits for it instead of suspending the job."""
    w = world
    template = {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}
    ok(w.kube, "apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "gap", "namespace": w.ns, "annotations": {"trainguard.dev/policy": ""}},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "ExitCode",
                                                    "template": template}}},
    }))
    wid = common.workload_id(w.ns, "PyTorchJob", "gap")

    def labels(index: int) -> dict[str, str]:
        return {"training.kubeflow.org/job-name": "gap", "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": str(index)}

    for index in (0, 1):
        w.pod(f"gap-worker-{index}", w.nodes[index], labels(index))
    await w.in_cache(wid, tasks=2)
    w.pod("gap-worker-1", w.nodes[1], labels(1), phase="Failed",
          terminated={"exitCode": 137, "reason": "Error", "message": "killed"})
    assert (await w.adapter.get_job(wid)).attempt == 0
    ok(w.kube, "delete", "pod", "gap-worker-1", "-n", w.ns, "--wait=true")

    step = asyncio.create_task(w.adapter.requeue_hold(wid, attempt=0))
    await asyncio.sleep(2)
    assert not step.done()  # waiting for the successor
    w.pod("gap-worker-1", w.nodes[2], labels(1))
    await asyncio.wait_for(step, 60)
    body = json.loads(ok(w.kube, "get", "pytorchjob", "gap", "-n", w.ns, "-o", "json"))
    assert not body["spec"].get("runPolicy", {}).get("suspend")
    assert common.RESTARTS_ANNOTATION not in body["metadata"].get("annotations", {})


async def test_executor_lets_the_jobsets_own_restart_stand_and_only_excludes_the_node(
        world: World, tmp_path: Path) -> None:
    """The JobSet's failure policy restarted it before we acted: the executor records the restart as
    already in effect (no second restart), excludes the suspect node, and verifies with fresh reads."""
    w = world
    wid = w.jobset("train")
    w.jobset_pods("train", layout(w))

    await w.in_cache(wid)
    status_patch(w.kube, "jobset", "train", w.ns, {"restarts": 1})
    store = await database.open_store(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    try:
        now = clock.SystemClock().now()
        await store.upsert_workload(workload=wid, scheduler="kubernetes", job_id=wid, policy="gpu",
                                    comment="trainguard policy=gpu", at=now)
        item = advice.Advice.model_validate({
            "workload": wid, "attempt": 0, "generation": 1, "action": vocab.AdviceAction.REQUEUE,
            "mode": vocab.Mode.ACTION, "deadline": now + 300, "reasons": ["gpu_xid_hardware on node 2"],
            "policy": "gpu", "exclude_nodes": [w.nodes[1]]})
        disposition = await executor.Executor(w.adapter, store, clock.SystemClock()).reconcile(item)
        assert disposition is vocab.Disposition.CONVERGED
        rows = {r.step: r for r in await store.actions_for(wid, 0, 1)}
        assert rows["requeue_hold"].status.value == "skipped" and rows["release"].status.value == "skipped"
        assert rows["exclude_nodes"].status.value == "done"
        body = json.loads(ok(w.kube, "get", "jobset", "train", "-n", w.ns, "-o", "json"))
        assert not body["spec"].get("suspend") and common.RESTARTS_ANNOTATION not in body["metadata"].get(
            "annotations", {})
        assert nodes.has_our_taint(w.node(w.nodes[1]))
    finally:
        await store.close()


async def test_the_operator_keeps_a_workload_recovery_owned_by_each_opted_in_jobset(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``trainguard operator --scheduler kubernetes`` as the shipped RBAC's identity: the opted-in
    JobSet gets a WorkloadRecovery in its namespace with an owner reference to it (garbage-collected
    with it); the other JobSet gets none; the printer columns show the mode and the latest step."""
    w = world
    ok(w.kube, "apply", "-k", str(REPO / "crds"))
    for crd in ("recoverypolicies.trainguard.dev", "workloadrecoveries.trainguard.dev"):
        ok(w.kube, "wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    w.jobset("train")
    w.jobset("not-mine", policy=None)
    w.jobset_pods("train", layout(w))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "operator.kubeconfig"))
    config = operator.OperatorConfig(
        scheduler="kubernetes", namespaces=(w.ns,), workload_namespace=w.ns,
        db_url=f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}", status_interval_s=0.5,
        engine=settings_mod.EngineSettings(discovery_interval_s=1.0))
    stop = asyncio.Event()
    running = asyncio.create_task(operator.run(config, stop_flag=stop))
    try:
        async def created() -> bool:
            assert not running.done(), running.exception() if not running.cancelled() else "cancelled"
            done = await asyncio.to_thread(w.kube.kubectl, "get", "workloadrecovery", "jobset-train", "-n", w.ns,
                                           "-o", "json")
            return done.returncode == 0

        await until(created, "the WorkloadRecovery of the opted-in JobSet", within_s=120.0)
        recovery_obj = json.loads(ok(w.kube, "get", "workloadrecovery", "jobset-train", "-n", w.ns, "-o", "json"))
        owner = json.loads(ok(w.kube, "get", "jobset", "train", "-n", w.ns, "-o", "json"))["metadata"]
        (ref,) = recovery_obj["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == ("JobSet", "train", owner["uid"])
        assert recovery_obj["spec"]["workload"]["kind"] == "JobSet"
        assert recovery_obj["metadata"]["annotations"]["trainguard.dev/workload"] == f"k8s/{w.ns}/JobSet/train"
        names = ok(w.kube, "get", "workloadrecoveries", "-n", w.ns, "-o", "name").split()
        assert names == ["workloadrecovery.trainguard.dev/jobset-train"]
        header = ok(w.kube, "get", "workloadrecoveries", "-n", w.ns).splitlines()[0].split()
        assert {"MODE", "LAST", "STEP", "ADVICE"} <= set(header)
    finally:
        stop.set()
        await asyncio.wait_for(running, 60)


ENGINE_POLICY = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {{name: gpu}}
spec:
  mode: {mode}
  detection: {{settle: 1s, hangTimeout: 600s}}
"""
XID = "1: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."


@pytest.mark.parametrize("mode", ["Action", "Monitor"])
async def test_engine_on_the_adapter_excludes_the_xid_node_once_and_lets_the_jobsets_restart_stand(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """The product's engine over the adapter. The pod log is a file at the workload's output path
    (``k8s://NS/JobSet/NAME`` read as a relative path): the pod-log source is not what is under test.
    Rank 1 (leaders-1, on node 2) prints an Xid 79 and fails; the JobSet controller's restart is
    written as it would write it. Action: node 2 is cordoned and tainted by us, the restart is not
    repeated, the JobSet is never suspended. Monitor: the advice is recorded and nothing changes."""
    from trainguard import engine as engine_mod
    from trainguard.detect import catalog as catalog_mod
    from trainguard.policy import loader

    w = world
    wid = w.jobset("train")
    w.jobset_pods("train", layout(w))
    monkeypatch.chdir(tmp_path)
    log = tmp_path / f"k8s:/{w.ns}/JobSet/train"
    log.parent.mkdir(parents=True)
    log.write_text("0: iteration 1 loss 2.0\n1: iteration 1 loss 2.0\n")
    store = await database.open_store(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    engine = engine_mod.Engine(
        w.adapter, store, loader.parse_text(ENGINE_POLICY.format(mode=mode), "test"), catalog_mod.load_catalog(),
        clock_=clock.SystemClock(), settings=settings_mod.EngineSettings(allow_action=True, discovery_interval_s=0.5))
    stop = asyncio.Event()
    running = asyncio.create_task(engine.run(stop))
    try:
        async def tracked() -> bool:
            return wid in engine.runtimes

        await until(tracked, "the engine tracking the JobSet")
        with log.open("a") as out:
            out.write(XID + "\n")
        w.pod("train-leaders-0-1-a0", w.nodes[1], {
            "jobset.sigs.k8s.io/jobset-name": "train", "jobset.sigs.k8s.io/replicatedjob-name": "leaders",
            "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-completion-index": "1"},
            phase="Failed", terminated={"exitCode": 1, "reason": "Error", "startedAt": "2026-12-01T10:00:00Z",
                                        "finishedAt": "2026-12-01T10:01:00Z"})

        async def detected() -> bool:
            return bool(await store.audit_records(workload=wid, kind=vocab.AuditKind.ANOMALY))

        await until(detected, "the anomaly", within_s=40.0)
        status_patch(w.kube, "jobset", "train", w.ns, {"restarts": 1})  # the JobSet controller's restart

        async def closed() -> bool:
            return bool(await store.audit_records(workload=wid, kind=vocab.AuditKind.OUTCOME))

        try:
            await until(closed, "the advice's outcome", within_s=120.0)
        except AssertionError:
            trail = [(r.kind, r.payload) for r in await store.audit_records(workload=wid)]
            raise AssertionError(f"no outcome; audit trail: {trail}; job {engine.runtimes[wid].job}") from None
        trail = [(r.kind.value, r.payload) for r in await store.audit_records(workload=wid)]
        [anomaly] = await store.audit_records(workload=wid, kind=vocab.AuditKind.ANOMALY)
        assert anomaly.payload["suspect_nodes"] == [w.nodes[1]], trail
        [item] = await store.audit_records(workload=wid, kind=vocab.AuditKind.ADVICE)
        assert item.payload["exclude_nodes"] == [w.nodes[1]], trail
        body = json.loads(ok(w.kube, "get", "jobset", "train", "-n", w.ns, "-o", "json"))
        assert not body["spec"].get("suspend")
        assert common.RESTARTS_ANNOTATION not in (body["metadata"].get("annotations") or {})
        if mode == "Action":
            assert nodes.has_our_taint(w.node(w.nodes[1])) and w.node(w.nodes[1])["spec"]["unschedulable"]
            done = [r.payload for r in await store.audit_records(workload=wid, kind=vocab.AuditKind.ACTION)]
            carried = [p.get("step") for p in done if p.get("status") == "done"]
            # requeue_hold is "done" when it ran and found the JobSet's own restart (then it changes
            # nothing), or skipped when the restart was visible first; either way never a suspend
            assert "exclude_nodes" in carried and set(carried) <= {"requeue_hold", "exclude_nodes"}
        else:
            assert not any(nodes.has_our_taint(w.node(n)) or w.node(n)["spec"].get("unschedulable")
                           for n in w.nodes)
    finally:
        stop.set()
        await asyncio.wait_for(running, 60)
        await store.close()
