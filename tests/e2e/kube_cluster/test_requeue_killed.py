"""End to end on the simulated cluster: the operator is killed with SIGKILL while a JobSet it
restarts is suspended, between our suspend and our resume.

A JobSet's logs stop (a hang: its own failure policy does nothing), so the advice is a restart of
ours: suspend, wait for the pods to go, resume. A pod of the JobSet that the suspend does not take
away (owned by the JobSet itself, as when its controller is slow or down) keeps the wait open, and
the operator gets SIGKILL as soon as the JobSet shows our suspend. The pod is then removed and a new
operator starts on the same audit database: it resumes the recovery from its action rows and
resumes the JobSet (new pods, one restart of ours counted). Before, suspend-wait-resume was one
``requeue`` step: its restart count moves at the suspend, so the restarted executor took the requeue
as done, verify failed ("job is held") and nothing ever resumed the JobSet.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.kube.operator_process import OperatorProcess
from tests.e2e.kube_cluster.harness import POLICY, WAIT_S, install, lines_read, pods_of, until
from tests.support.kube_cluster import JOBSET_NAME_LABEL, SimCluster
from trainguard.k8s.kubejobs import common
from trainguard.model import vocab
from trainguard.store import database

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.timeout(600)]


def _env(sim: SimCluster, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINGUARD_", "KUBECONFIG"))}
    env.update({"KUBECONFIG": str(sim.kubeconfig), "TRAINGUARD_HOME": str(home), "HOME": str(home)})
    return env


def _suspended_by_us(sim: SimCluster, ns: str) -> bool:
    body = sim.get("jobset", "train", ns) or {}
    notes = body.get("metadata", {}).get("annotations") or {}
    return bool(body.get("spec", {}).get("suspend")) and common.SUSPENDED_BY_ANNOTATION in notes


async def test_the_operator_killed_between_suspend_and_resume_resumes_the_jobset_after_its_restart(
        sim_cluster: SimCluster, sim_namespace: str, tmp_path: Path) -> None:
    sim, ns = sim_cluster, sim_namespace
    install(sim, POLICY.format(ns=ns, mode="Action"))
    sim.create_jobset("train", ns, replicated_jobs=(("workers", 1, 2),), gpus=4,
                      annotations={"trainguard.dev/policy": "gpu", "trainguard.dev/overrides": "hang-timeout=10s"})

    def workers() -> list[dict[str, Any]]:
        return [p for p in pods_of(sim, ns, "train") if p["metadata"]["name"] != "train-stays"]

    def two_running() -> list[dict[str, Any]] | None:
        pods = workers()
        return pods if len(pods) == 2 and all(p.get("status", {}).get("phase") == "Running" for p in pods) else None

    first = await until("2 running pods", two_running)
    uid = (sim.get("jobset", "train", ns) or {})["metadata"]["uid"]
    sim.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "train-stays", "namespace": ns, "labels": {JOBSET_NAME_LABEL: "train"},
        "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train",
                             "uid": uid, "controller": True}]},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}})
    for pod in first:
        sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 1 loss 2.0"])
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}"
    args = ["--scheduler", "kubernetes", "--mode", "action", "--namespace", ns, "--db", db_url,
            "--poll", "0.5", "--status-interval", "0.5", "--http-listen", "off"]
    env = _env(sim, tmp_path / "home")
    log = tmp_path / "operator.log"
    wid = common.workload_id(ns, "JobSet", "train")
    processes: list[OperatorProcess] = []
    store = await database.open_store(db_url)
    try:
        killed = OperatorProcess(args, env, log)
        processes.append(killed)
        killed.start()
        await until("the WorkloadRecovery", lambda: sim.get("workloadrecovery", "jobset-train", ns))
        await until("the first line of each pod read", lambda: lines_read(tmp_path / "audit.db", wid) >= len(first))
        for pod in first:
            sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 2 loss 1.9"])  # then silence: a hang

        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while not await asyncio.to_thread(_suspended_by_us, sim, ns):
            assert killed.alive(), killed.tail()
            assert loop.time() < deadline, f"the JobSet was not suspended by us\n{killed.tail()}"
            await asyncio.sleep(0.1)
        os.kill(killed.pid, signal.SIGKILL)
        assert killed.proc is not None and killed.proc.wait(timeout=30) == -signal.SIGKILL
        before = [(r.kind.value, r.payload) for r in await store.audit_records(workload=wid)]
        assert not await store.audit_records(workload=wid, kind=vocab.AuditKind.OUTCOME), before  # mid-recovery
        assert await asyncio.to_thread(_suspended_by_us, sim, ns), before
        sim.kubectl("delete", "pod", "train-stays", "-n", ns, "--wait=false")

        again = OperatorProcess(args, env, log)
        processes.append(again)
        again.start()
        deadline = loop.time() + WAIT_S
        while not await store.audit_records(workload=wid, kind=vocab.AuditKind.OUTCOME):
            assert again.alive(), again.tail()
            assert loop.time() < deadline, f"no outcome recorded\n{again.tail()}"
            await asyncio.sleep(0.5)
        trail = [(r.kind.value, r.payload) for r in await store.audit_records(workload=wid)]
        [advice] = await store.audit_records(workload=wid, kind=vocab.AuditKind.ADVICE)
        assert advice.payload["action"] == "requeue", trail
        [outcome] = await store.audit_records(workload=wid, kind=vocab.AuditKind.OUTCOME)
        assert outcome.payload.get("disposition") == "Converged", trail
        done = [r.payload.get("step") for r in await store.audit_records(workload=wid, kind=vocab.AuditKind.ACTION)
                if r.payload.get("status") == "done"]
        assert done.count("requeue_hold") == 1 and done.count("release") == 1, trail  # each once

        body = sim.get("jobset", "train", ns) or {}
        notes = body["metadata"].get("annotations") or {}
        assert not body["spec"].get("suspend"), trail
        assert notes.get(common.RESTARTS_ANNOTATION) == "1", trail
        assert common.SUSPENDED_BY_ANNOTATION not in notes, trail
        old = {p["metadata"]["uid"] for p in first}
        new = await until("2 new running pods", lambda: (pods := two_running()) and not {
            p["metadata"]["uid"] for p in pods} & old and pods)
        assert len(new) == 2
    finally:
        await store.close()
        for process in processes:
            process.stop()
