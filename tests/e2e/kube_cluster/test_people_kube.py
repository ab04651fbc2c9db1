"""People on the simulated cluster: a JobSet a person suspends, and one a person deletes, while the
operator (``trainguard operator --scheduler kubernetes``, both keys on, an Action policy) watches them.

Both are someone's decision: recorded (an ``action`` record with status ``not-ours``; a ``LeftAlone``
Event on the suspended JobSet), never undone: the suspended JobSet stays suspended (we
resume only a suspend of ours), nothing is restarted, no node is cordoned or tainted.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.kube_cluster.harness import POLICY, install, lines_read, operator_running, running, until
from tests.support.kube_cluster import JOBSET_NAME_LABEL, NODES, SimCluster
from trainguard.k8s.kubejobs import common, nodes
from trainguard.model import vocab
from trainguard.store import audit, database

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.timeout(600)]


async def not_ours(db_url: str, workload: str) -> list[dict[str, Any]]:
    store = await database.open_store(db_url)
    try:
        records: list[audit.AuditRecord] = await store.audit_records(workload=workload)
    finally:
        await store.close()
    return [r.payload for r in records if r.kind is vocab.AuditKind.ACTION and r.payload.get("status") == "not-ours"]


async def advice_of(db_url: str, workload: str) -> list[dict[str, Any]]:
    store = await database.open_store(db_url)
    try:
        return [r.payload for r in await store.audit_records(workload=workload, kind=vocab.AuditKind.ADVICE)]
    finally:
        await store.close()


async def test_a_jobset_a_person_suspends_or_deletes_is_theirs(
        sim_cluster: SimCluster, sim_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sim, ns = sim_cluster, sim_namespace
    install(sim, POLICY.format(ns=ns, mode="Action"))
    for name in ("paused", "gone"):
        sim.create_jobset(name, ns, replicated_jobs=(("workers", 1, 2),), gpus=4,
                          annotations={"trainguard.dev/policy": "gpu"})
    for name in ("paused", "gone"):
        pods = await until(f"2 running pods of {name}", lambda name=name: (
            p if len(p := [x for x in sim.pods(ns, f"{JOBSET_NAME_LABEL}={name}")
                           if x.get("status", {}).get("phase") == "Running"]) == 2 else None))
        for pod in pods:
            sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 1 loss 2.0"])
    paused, gone = common.workload_id(ns, "JobSet", "paused"), common.workload_id(ns, "JobSet", "gone")

    async with operator_running(sim, ns, tmp_path, monkeypatch) as op:
        for wid in (paused, gone):
            await until(f"{wid} read", lambda wid=wid: lines_read(op.db, wid) >= 2)
        suspend = json.dumps({"spec": {"suspend": True}})
        sim.kubectl("patch", "jobset", "paused", "-n", ns, "--type=merge", "-p", suspend)
        sim.kubectl("delete", "jobset", "gone", "-n", ns, "--wait=false")

        suspended = await until("the person's suspend on record", lambda: _sync(not_ours(op.db_url, paused)))
        deleted = await until("the person's deletion on record", lambda: _sync(not_ours(op.db_url, gone)))
        assert [(c["by"], c["change"]) for c in suspended] == [("person", "held")], suspended
        assert [(c["by"], c["change"]) for c in deleted] == [("person", "deleted")], deleted

        def left_alone_event() -> bool:  # on the JobSet itself, where its other Events go
            events = json.loads(sim.kubectl("get", "events", "-n", ns, "-o", "json"))["items"]
            return any(e.get("reason") == "LeftAlone" and e["involvedObject"].get("kind") == "JobSet"
                       and e["involvedObject"]["name"] == "paused" for e in events)

        await until("the LeftAlone Event on the suspended JobSet", left_alone_event)

        assert await advice_of(op.db_url, paused) == [] and await advice_of(op.db_url, gone) == []
        jobset = sim.get("jobset", "paused", ns) or {}
        assert jobset["spec"].get("suspend") is True  # never resumed by us
        assert common.SUSPENDED_BY_ANNOTATION not in (jobset["metadata"].get("annotations") or {})
        assert not running(sim, ns, "paused", 0)
    assert all(not nodes.has_our_taint(sim.get("node", n) or {}) for n in NODES)


def _sync(coro: Any) -> Any:
    """Run ``coro`` to its end on a loop of this worker thread (``until`` polls off the test's loop)."""
    return asyncio.run(coro)
