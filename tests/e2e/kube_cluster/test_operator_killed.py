"""End to end on the simulated cluster: the operator is killed with SIGKILL mid-recovery.

``trainguard operator --scheduler kubernetes --mode action`` runs as a subprocess (as in the
Slurm adversarial tests). A JobSet pod prints an Xid 79 line and fails; as soon as the first
action intent of the advice is recorded the operator gets SIGKILL, and a new one starts on the same
audit database. It resumes the advice from its intent rows: exactly one effective action on each
thing (one cordon + taint of the node; the restart is the JobSet's own failure policy's, never a
suspend/resume of ours on top), and the JobSet completes away from the node.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tests.e2e.kube.operator_process import OperatorProcess
from tests.e2e.kube_cluster.harness import (
    POLICY,
    WAIT_S,
    XID,
    completed,
    install,
    lift_our_exclusions,
    lines_read,
    restarted,
    running,
    until,
)
from tests.support.kube_cluster import SimCluster
from trainguard.k8s.kubejobs import common, nodes
from trainguard.model import vocab
from trainguard.store import database

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.timeout(600)]


def _env(sim: SimCluster, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINGUARD_", "KUBECONFIG"))}
    env.update({"KUBECONFIG": str(sim.kubeconfig), "TRAINGUARD_HOME": str(home), "HOME": str(home)})
    return env


async def test_the_operator_killed_mid_recovery_acts_exactly_once_after_its_restart(
        sim_cluster: SimCluster, sim_namespace: str, tmp_path: Path) -> None:
    sim, ns = sim_cluster, sim_namespace
    install(sim, POLICY.format(ns=ns, mode="Action"))
    sim.create_jobset("train", ns, replicated_jobs=(("leaders", 1, 2), ("workers", 1, 2)), gpus=4,
                      annotations={"trainguard.dev/policy": "gpu"})
    first = await until("4 running pods of attempt 0", lambda: running(sim, ns, "train", 0))
    for pod in first:
        sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 1 loss 2.0"])
    victim = first[1]
    bad = victim["spec"]["nodeName"]
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
        # the Xid line is printed while we watch: the operator has read each pod's first line
        await until("the first line of each pod read", lambda: lines_read(tmp_path / "audit.db", wid) >= len(first))
        sim.write_pod_log(ns, victim["metadata"]["name"], [XID])
        sim.fail_pod(ns, victim["metadata"]["name"], exit_code=1, reason="Error", message="GPU fell off the bus")

        async def an_intent() -> bool:
            rows = await store.audit_records(workload=wid, kind=vocab.AuditKind.ACTION)
            return any(r.payload.get("status") == "intent" for r in rows)

        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while not await an_intent():
            assert killed.alive(), killed.tail()
            assert loop.time() < deadline, f"no action intent recorded\n{killed.tail()}"
            await asyncio.sleep(0.1)
        os.kill(killed.pid, signal.SIGKILL)
        assert killed.proc is not None and killed.proc.wait(timeout=30) == -signal.SIGKILL
        before = [(r.kind.value, r.payload) for r in await store.audit_records(workload=wid)]
        assert not await store.audit_records(workload=wid, kind=vocab.AuditKind.OUTCOME), before  # mid-recovery

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
        assert advice.payload["action"] == "requeue" and advice.payload["exclude_nodes"] == [bad], (
            advice.payload["reasons"], trail)
        [outcome] = await store.audit_records(workload=wid, kind=vocab.AuditKind.OUTCOME)
        assert outcome.payload.get("disposition") == "Converged", trail
        done = [r.payload.get("step") for r in await store.audit_records(workload=wid, kind=vocab.AuditKind.ACTION)
                if r.payload.get("status") == "done"]
        # each step carried out once at most (a requeue_hold "done" is the JobSet's own restart observed)
        assert done.count("exclude_nodes") == 1 and all(done.count(s) <= 1 for s in done), trail

        node = sim.get("node", bad) or {}
        assert nodes.has_our_taint(node) and node["spec"]["unschedulable"] is True
        ours = [t for t in node["spec"].get("taints") or [] if t.get("key") == nodes.TAINT_KEY]
        assert len(ours) == 1
        jobset = sim.get("jobset", "train", ns) or {}
        assert not jobset["spec"].get("suspend")
        assert common.RESTARTS_ANNOTATION not in (jobset["metadata"].get("annotations") or {}), trail

        pods = await until("the restarted JobSet running off the node", lambda: restarted(sim, ns, "train"))
        if any(p["spec"]["nodeName"] == bad for p in pods):  # placed before our taint: evicted, restarted
            pods = await until("the JobSet running off the node", lambda: (p := restarted(sim, ns, "train")) and all(
                x["spec"]["nodeName"] != bad for x in p) and p)
        for pod in pods:
            sim.complete_pod(ns, pod["metadata"]["name"])

        await until("the JobSet completed", lambda: completed(sim, ns, "train"))
        # One restart for the failure, by the JobSet's own policy (none of ours: no restarts
        # annotation, never suspended). While we were down its new pods could land on the node: our
        # NoExecute taint then evicts them and its policy restarts once more, away from the node.
        restarts = int(((sim.get("jobset", "train", ns) or {}).get("status") or {}).get("restarts") or 0)
        assert restarts in (1, 2), trail
        assert common.RESTARTS_ANNOTATION not in ((sim.get("jobset", "train", ns) or {})["metadata"].get(
            "annotations") or {})
    finally:
        await store.close()
        for process in processes:
            process.stop()
        lift_our_exclusions(sim)
