"""The node lifecycle in the audit store (SQLite, PostgreSQL, MySQL/MariaDB): a verdict names a placed
node suspect in its own transaction; a person's hold and return are recorded with who made them; a
refused decision writes nothing; every transition is in the audit stream."""

from __future__ import annotations

import pytest

from trainguard.model import lifecycle, verdicts, vocab
from trainguard.store import audit, database

T0 = 1_800_000_000.0
W = "slurm/test/9"


def a_verdict(*nodes: str, attribution: vocab.Attribution = vocab.Attribution.HARDWARE) -> verdicts.Verdict:
    return verdicts.Verdict(attribution=attribution, category=vocab.Category.GPU_XID_HARDWARE,
                            suspect_nodes=list(nodes), confidence=0.9, reasons=["xid 79"])


async def test_a_verdict_names_only_placed_nodes_suspect_and_once(db_url: str) -> None:
    store = await database.open_store(db_url)
    try:
        await store.record_attempt(workload=W, attempt=0, at=T0, nodes=["n1", "n2"])
        await store.record_verdict(workload=W, attempt=0, verdict=a_verdict("n1", "forged"), at=T0 + 1)
        await store.record_verdict(workload=W, attempt=0, verdict=a_verdict("n1"), at=T0 + 2)
        [n1] = await store.node_states()
        assert (n1.node, n1.state, n1.event, n1.workload, n1.attempt) == (
            "n1", lifecycle.NodeState.SUSPECT, lifecycle.NodeEvent.NAMED, W, 0)
        assert n1.at == T0 + 1 and "gpu_xid_hardware" in n1.reason and n1.evidence["attribution"] == "hardware"
        assert len(await store.node_transitions("n1")) == 1  # the same fact twice is one row
        assert await store.node_state("forged") is None  # log text cannot name a node
        await store.record_verdict(workload=W, attempt=0, at=T0 + 3,
                                   verdict=a_verdict("n2", attribution=vocab.Attribution.APPLICATION))
        assert await store.node_state("n2") is None  # an application bug is not the node's fault
    finally:
        await store.close()


async def test_a_persons_hold_and_return_are_recorded_with_who_and_refusals_write_nothing(db_url: str) -> None:
    store = await database.open_store(db_url)
    try:
        with pytest.raises(lifecycle.Refused, match="in-service"):
            await store.decide_node("n5", lifecycle.NodeEvent.HELD, by="alice", channel="cli", at=T0, reason="x")
        assert await store.node_transitions("n5") == []
        await store.record_attempt(workload=W, attempt=0, at=T0, nodes=["n5"])
        await store.record_verdict(workload=W, attempt=0, verdict=a_verdict("n5"), at=T0 + 1)
        held = await store.decide_node("n5", lifecycle.NodeEvent.HELD, by="alice", channel="cli", at=T0 + 2,
                                       reason="ticket 12")
        assert (held.state, held.by, held.reason) == (lifecycle.NodeState.HELD_FOR_REPAIR, "alice", "ticket 12")
        back = await store.decide_node("n5", lifecycle.NodeEvent.CLEARED, by="bob", channel="api", at=T0 + 3,
                                       reason="fixed")
        assert back.state is lifecycle.NodeState.OUT_OF_SERVICE
        assert [(t.state.value, t.by) for t in await store.node_transitions("n5")] == [
            ("suspect", "trainguard"), ("held-for-repair", "alice"), ("out-of-service", "bob")]
        stream = [r for r in await store.audit_records(kind=vocab.AuditKind.ACTION)
                  if str(r.payload.get("operation", "")).startswith("node-")]
        assert [(r.payload["operation"], r.payload["by"], r.decided_by) for r in stream] == [
            ("node-held", "alice", "cli"), ("node-cleared", "bob", "api")]
    finally:
        await store.close()


async def test_our_rules_transitions_are_audited_and_a_refused_one_is_dropped(db_url: str) -> None:
    store: audit.AuditStore = await database.open_store(db_url)
    try:
        seen = await store.advance_node("n7", lifecycle.NodeEvent.SEEN_OTHER, at=T0, reason="maintenance")
        assert seen is not None and seen.state is lifecycle.NodeState.OTHER
        assert await store.advance_node("n7", lifecycle.NodeEvent.RESUMED, at=T0 + 1, reason="no") is None
        back = await store.advance_node("n7", lifecycle.NodeEvent.SEEN_BACK, at=T0 + 2, reason="back")
        assert back is not None and back.state is lifecycle.NodeState.IN_SERVICE
        assert [t.state.value for t in await store.node_states()] == ["in-service"]
    finally:
        await store.close()
