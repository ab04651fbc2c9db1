"""Engine: only nodes the scheduler placed the workload on are acted on, and only our own
exclusions count against ``maxExcludedNodesPerJob`` (issue 9, defects 2 and 3; lemon memory per
(workload, attempt))."""

from __future__ import annotations

from tests.unit.engine import scenario
from trainguard.model import vocab

POLICIES = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: act}
spec:
  mode: Action
  retries: {maxRetries: 5, maxAttemptsWithoutCheckpoint: 10, backoff: {initialSeconds: 0}}
  detection: {settle: 1s, hangTimeout: 60s}
  exclusion: {maxExcludedNodesPerJob: 1, lemonNodeThreshold: 2, drainLemonNodes: true}
  actions: {allowed: [requeue, stop, drainNode]}
  blastRadius: {maxDrainedShare: 0.5}
---
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: lemons}
spec:
  mode: Monitor
  retries: {maxRetries: 5, maxAttemptsWithoutCheckpoint: 10, backoff: {initialSeconds: 0}}
  detection: {settle: 1s, hangTimeout: 60s}
  exclusion: {excludeOnHardware: false, lemonNodeThreshold: 3}
"""
"""``act``: a cap of one exclusion, lemons at two incidents, lemon drains allowed. ``lemons``
(Monitor, nothing excluded): the same node can be implicated by attempt after attempt."""


def syslog_xid(node: str) -> str:
    """A kernel Xid line in syslog form, naming ``node`` as the host that logged it."""
    return f"Nov 30 13:00:00 {node} kernel: {scenario.XID_79}"


async def test_a_users_own_exclusion_does_not_use_up_the_cap(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness(policies=POLICIES)
    h.submit("40", excluded_nodes=["node6"])  # the user's own --exclude
    h.write("40", *scenario.ranked(1, scenario.XID_79))  # rank 1 runs on node2
    await h.step()
    await h.settle()

    advice = await h.advice("40")
    assert [(a["action"], sorted(a["exclusions"])) for a in advice] == [("requeue", ["node2", "node6"])], advice
    assert sorted(h.scheduler.jobs["40"].excluded_nodes) == ["node2", "node6"], "the user's exclusion stays"


async def test_our_own_exclusions_count_against_the_cap_across_a_restart(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness(policies=POLICIES)
    h.submit("41", excluded_nodes=["node6"])
    h.write("41", *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()
    assert sorted(h.scheduler.jobs["41"].excluded_nodes) == ["node2", "node6"]

    h.engine = h.new_engine()  # a restart: the in-memory ledger is gone, the action rows are not
    h.scheduler.start("41", ["node1", "node3"])
    await h.step()
    h.write("41", *scenario.ranked(1, scenario.XID_79))  # now on node3
    await h.step()
    await h.settle()

    advice = await h.advice("41")
    assert [a["attempt"] for a in advice] == [0, 1]
    assert sorted(advice[1]["exclusions"]) == ["node2", "node6"], advice[1]
    assert any("maxExcludedNodesPerJob 1 reached (ours: node2)" in r for r in advice[1]["reasons"]), advice[1]
    assert sorted(h.scheduler.jobs["41"].excluded_nodes) == ["node2", "node6"]


async def test_a_node_named_only_by_log_text_is_never_a_suspect_drained_or_remembered(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness(policies=POLICIES)
    for job_id in ("42", "43", "44"):  # three jobs on node1+node2 print a line naming node5
        h.submit(job_id)
        h.write(job_id, *scenario.ranked(1, syslog_xid("node5")))
    await h.step()
    await h.settle()

    assert "drain_node" not in h.mutations(), h.scheduler.mutations
    assert not h.scheduler.nodes["node5"].drained
    assert [i.node for i in await h.store.node_history(since=0)] == []
    for job_id in ("42", "43", "44"):
        anomaly = (await h.records(job_id, vocab.AuditKind.ANOMALY))[0].payload
        assert "node5" not in anomaly["suspect_nodes"]
        assert any("node5" in e["text"] for e in anomaly["evidence"]), "the name stays evidence text"
        verdict = (await h.records(job_id, vocab.AuditKind.VERDICT))[0].payload
        assert "node5" not in verdict["nodes"] and verdict["lemon_nodes"] == [], verdict
        assert verdict["outside_allocation"] == ["node5"], verdict
        advice = (await h.advice(job_id))[0]
        assert "node5" not in advice["exclusions"] and advice["drain_nodes"] == [], advice
        assert "node5" not in h.scheduler.jobs[job_id].excluded_nodes


async def test_the_allocation_is_remembered_across_a_restart(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness(policies=POLICIES)
    h.submit("45")
    await h.step()
    assert await h.store.allocation(scenario.workload_of("45")) == ["node1", "node2"]


async def test_lemon_memory_counts_each_attempt_of_a_workload_once(make_harness: scenario.MakeHarness) -> None:
    """Threshold 3: node2 implicated by attempts 0, 1 and 2 of one workload is a lemon at attempt 2;
    two verdicts of one attempt are one incident."""
    h = await make_harness(policies=POLICIES)
    h.submit("46", "trainguard policy=lemons")
    lemons: list[list[str]] = []
    for attempt in range(3):
        if attempt:
            h.change("46", attempt=attempt)
            await h.step()
        h.write("46", *scenario.ranked(1, scenario.XID_79))
        await h.step()
        await h.settle()
        verdicts = await h.records("46", vocab.AuditKind.VERDICT)
        lemons.append(verdicts[-1].payload["lemon_nodes"])
    assert lemons == [[], [], ["node2"]]
    history = await h.store.node_history(since=0)
    assert sorted((i.node, i.attempt) for i in history) == [("node2", 0), ("node2", 1), ("node2", 2)]
