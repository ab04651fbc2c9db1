"""End to end on the simulated cluster: a JobSet deleted and created again under its name (a
re-applied manifest, a GitOps sync) is a new job. Its failure is judged on its own: its first
attempt gets its own advice, though the one before it under the same name had been advised at the
same attempt number. The old history continues under a retired id, and the audit log keeps both."""

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
    pods_of,
    printed_and_read,
    until,
)
from tests.support.kube_cluster import SimCluster
from trainguard.k8s.kubejobs import common
from trainguard.model import vocab
from trainguard.store import database


def is_retired(db: Path, workload: str) -> bool:
    """Whether the audit store holds ``workload`` (a retired id) yet."""
    with contextlib.closing(sqlite3.connect(db, timeout=5)) as connection:
        return connection.execute("SELECT 1 FROM workloads WHERE id = ?", (workload,)).fetchone() is not None


pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.timeout(600)]


async def test_a_jobset_created_again_under_its_name_is_judged_as_a_new_job(
        sim_cluster: SimCluster, sim_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sim, ns = sim_cluster, sim_namespace
    install(sim, POLICY.format(ns=ns, mode="Monitor"))
    wid = common.workload_id(ns, "JobSet", "train")

    def create() -> None:
        sim.create_jobset("train", ns, replicated_jobs=(("workers", 1, 2),), gpus=4,
                          annotations={"trainguard.dev/policy": "gpu"})

    def two_running() -> list[dict[str, Any]] | None:
        pods = pods_of(sim, ns, "train")
        return pods if len(pods) == 2 and all(p.get("status", {}).get("phase") == "Running" for p in pods) else None

    async with operator_running(sim, ns, tmp_path, monkeypatch) as op:
        create()
        first = await until("2 running pods", two_running)
        for pod in first:
            sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 1 loss 2.0"])
        await until("the first line of each pod read", lambda: lines_read(op.db, wid) >= len(first))
        await printed_and_read(sim, ns, first[0]["metadata"]["name"], [XID], op.db, wid)
        sim.fail_pod(ns, first[0]["metadata"]["name"], exit_code=1, reason="Error", message="GPU fell off the bus")
        old = (await op.recovery(wid)).one(vocab.AuditKind.ADVICE)
        assert old.attempt == 0

        uid = (sim.get("jobset", "train", ns) or {})["metadata"]["uid"]
        sim.kubectl("delete", "jobset", "train", "-n", ns, "--wait=true")
        await until("the old pods gone", lambda: not pods_of(sim, ns, "train"))
        create()
        second = await until("2 running pods of the new JobSet", two_running)
        assert (sim.get("jobset", "train", ns) or {})["metadata"]["uid"] != uid
        # The old object's read position stays under the id until the operator first sees the new
        # one and retires that history: only then do the lines read under the id count the new pods'.
        await until("the old history retired", lambda: is_retired(op.db, f"{wid}@{uid}"))
        for pod in second:
            sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 1 loss 2.0"])
        await until("the new JobSet's first lines read", lambda: lines_read(op.db, wid) >= len(second))
        victim = second[1]
        await printed_and_read(sim, ns, victim["metadata"]["name"], [XID], op.db, wid)
        sim.fail_pod(ns, victim["metadata"]["name"], exit_code=1, reason="Error", message="GPU fell off the bus")

        store = await database.open_store(op.db_url)
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT_S
            while len(await store.audit_records(workload=wid, kind=vocab.AuditKind.ADVICE)) < 2:
                assert loop.time() < deadline, [(r.kind.value, r.attempt) for r in await store.audit_records(
                    workload=wid)]
                await asyncio.sleep(0.5)
            _, new = await store.audit_records(workload=wid, kind=vocab.AuditKind.ADVICE)
            assert new.attempt == 0 and new.payload["action"] == "requeue", new.payload["reasons"]
            assert new.payload["exclude_nodes"] == [victim["spec"]["nodeName"]], new.payload["reasons"]
            [note] = await store.audit_records(workload=wid, kind=vocab.AuditKind.WATCHDOG)
            retired = note.payload["retired_as"]
            assert retired == f"{wid}@{uid}"
            assert await store.get_advice(retired, 0, 1) is not None
            # the new JobSet's history starts at attempt 0 (its controller may restart it meanwhile: 1)
            assert [f.attempt for f in await store.attempt_facts(wid)][:1] == [0]
        finally:
            await store.close()
