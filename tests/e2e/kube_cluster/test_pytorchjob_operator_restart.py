"""End to end on the simulated cluster: the operator restarts between two failures of a PyTorchJob.

The training-operator re-creates a failed Worker under its own name, and the pod's
``restartCount`` starts again from 0: nothing on the cluster counts that restart. The adapter
counts it while it watches; after a restart of ours the attempt it reports must still be the one
recorded before, so the next failure is judged as a new attempt, not as one already advised.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.kube_cluster.harness import (
    POLICY,
    WAIT_S,
    XID,
    install,
    lines_read,
    operator_running,
    printed_and_read,
    until,
)
from tests.e2e.kube_cluster.test_pytorchjob_recovery import live_pods
from tests.support.kube_cluster import SimCluster
from trainguard.k8s.kubejobs import common
from trainguard.model import vocab
from trainguard.store import audit, database

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.timeout(600)]


@pytest.mark.slow(
    reason="two failures of a PyTorchJob around a restart of the operator, each restart by the training-operator")
async def test_a_failure_after_a_restart_of_the_operator_is_judged_as_a_new_attempt(
        sim_cluster: SimCluster, sim_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sim, ns = sim_cluster, sim_namespace
    install(sim, POLICY.format(ns=ns, mode="Monitor"))
    sim.create_pytorchjob("ptj", ns, workers=2, gpus=4, annotations={"trainguard.dev/policy": "gpu"})
    first = await until("3 running pods", lambda: live_pods(sim, ns))
    for pod in first:
        sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 1 loss 2.0"])
    worker1 = next(p for p in first if p["metadata"]["name"].endswith("worker-1"))
    wid = common.workload_id(ns, "PyTorchJob", "ptj")

    async with operator_running(sim, ns, tmp_path, monkeypatch, lift=False) as op:
        await until("the WorkloadRecovery", lambda: sim.get("workloadrecovery", "pytorchjob-ptj", ns))
        await until("the first line of each pod read", lambda: lines_read(op.db, wid) >= len(first))
        await printed_and_read(sim, ns, worker1["metadata"]["name"], [XID], op.db, wid)
        sim.fail_pod(ns, worker1["metadata"]["name"], exit_code=137, reason="Error", message="killed")
        recorded = await op.recovery(wid)
        assert [r.attempt for r in recorded.records if r.kind == vocab.AuditKind.ADVICE] == [0], recorded.trail

        def recreated() -> list[dict[str, Any]] | None:
            pods = live_pods(sim, ns)
            return pods if pods and worker1["metadata"]["uid"] not in {p["metadata"]["uid"] for p in pods} else None

        second = await until("the Worker re-created and running", recreated)
        await until("attempt 1 seen", lambda: (sim.get("workloadrecovery", "pytorchjob-ptj", ns) or {}).get(
            "status", {}).get("attempt", 0) >= 1)
        # ... and recorded by the engine: the restarted operator resumes its count from the audit store (the
        # status can show the adapter's count a moment before the engine's tracking records the attempt)
        await until("attempt 1 in the audit store", lambda: recorded_attempts(op.db, wid) >= 2)

    async with operator_running(sim, ns, tmp_path, monkeypatch) as op:
        before = lines_read(op.db, wid)
        for pod in second:
            sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 2 loss 1.9"])
        await until("the new lines read after the restart", lambda: lines_read(op.db, wid) > before)
        worker0 = next(p for p in second if p["metadata"]["name"].endswith("worker-0"))
        await printed_and_read(sim, ns, worker0["metadata"]["name"], [XID], op.db, wid)
        sim.fail_pod(ns, worker0["metadata"]["name"], exit_code=137, reason="Error", message="killed")

        store = await database.open_store(op.db_url)
        try:
            async def advices() -> list[audit.AuditRecord]:
                return await store.audit_records(workload=wid, kind=vocab.AuditKind.ADVICE)

            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT_S
            while len(await advices()) < 2:
                assert loop.time() < deadline, [
                    (r.kind.value, r.attempt, r.payload.get("symptom") or r.payload.get("action"))
                    for r in await store.audit_records(workload=wid)]
                await asyncio.sleep(0.5)
            first_advice, again = await advices()
            assert (first_advice.attempt, again.attempt) == (0, 1)
            # judged as attempt 1: the second attempt in a row without a checkpoint (the policy's
            # default budget is 2), so a retry cannot make progress
            assert again.payload["action"] == "stop", again.payload["reasons"]
            assert any("2 attempts in a row without a new checkpoint" in r for r in again.payload["reasons"])
        finally:
            await store.close()


def recorded_attempts(db: Path, workload: str) -> int:
    """How many attempts of the workload the audit store holds."""
    with contextlib.closing(sqlite3.connect(db, timeout=5)) as connection:
        try:
            row = connection.execute("SELECT count(*) FROM attempts WHERE workload = ?", (workload,)).fetchone()
        except sqlite3.OperationalError:  # the schema is not there yet
            return 0
    return int(row[0] or 0)
