"""Engine: blast-radius limits evaluated and recorded in both modes, per partition and on usable
nodes; a person's hold survives our retry-backoff release."""

from __future__ import annotations

from tests.unit.engine import scenario
from trainguard.model import actions, vocab, workloads

MONITORED = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: watch}
spec:
  mode: Monitor
  detection: {settle: 1s}
  retries: {maxAttemptsWithoutCheckpoint: 10}
  blastRadius: {maxActionsPerHour: 2}
---
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: other}
spec:
  mode: Monitor
  detection: {settle: 1s}
  blastRadius: {maxActionsPerHour: 2}
"""

DRAINING = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {{name: drain}}
spec:
  mode: {mode}
  detection: {{settle: 1s}}
  retries: {{maxAttemptsWithoutCheckpoint: 10}}
  actions: {{allowed: [requeue, stop, drainNode]}}
  exclusion: {{lemonNodeThreshold: 1, drainLemonNodes: true}}
  blastRadius: {{maxActionsPerHour: 100, maxDrainedShare: 0.3}}
"""
"""Drains a node the second time a job's hardware failure names it; at most 30 % of a partition."""


async def hardware_crash(h: scenario.Harness, job_id: str) -> None:
    h.write(job_id, *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()


async def test_monitor_mode_records_what_the_actions_per_hour_limit_would_block(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness(policies=MONITORED)
    for job_id, nodes in {"40": ("node1", "node2"), "41": ("node3", "node4"), "42": ("node5", "node6")}.items():
        h.submit(job_id, "trainguard policy=watch", nodes=nodes)
    h.submit("43", "trainguard policy=other", nodes=("node1", "node3"))
    await h.step()

    for job_id in ("40", "41", "42", "43"):
        await hardware_crash(h, job_id)

    assert h.scheduler.mutations == []
    for job_id, in_window in (("40", 0), ("41", 1)):
        [outcome] = await h.outcomes(job_id)
        assert outcome["disposition"] == "Monitored"
        limit = outcome["blast_radius"]
        assert limit["would_block"] is False
        assert limit["checks"][0] | {"reason": ""} == {
            "limit": "maxActionsPerHour", "maximum": 2.0, "in_window": in_window, "planned": 1, "would_block": False,
            "reason": "",
        }
    [outcome] = await h.outcomes("42")
    assert outcome["disposition"] == "Monitored"
    assert outcome["blast_radius"]["would_block"] is True
    assert outcome["blast_radius"]["checks"][0]["in_window"] == 2
    assert "Monitor advice of policy 'watch' would have carried out" in outcome["blast_radius"]["counted"]
    assert "would be blocked" in outcome["detail"] and "maxActionsPerHour 2" in outcome["detail"]
    rows = await h.store.actions_for(scenario.workload_of("42"), 0, 1)
    assert rows and all(r.error.startswith("skipped: monitor mode; would be blocked: blast radius: ") for r in rows)
    # another policy's would-have-been operations are not in its window
    [other] = await h.outcomes("43")
    assert other["blast_radius"]["would_block"] is False and other["blast_radius"]["checks"][0]["in_window"] == 0


async def test_a_would_be_blocked_monitor_advice_is_not_counted_as_carried_out(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness(policies=MONITORED.replace("maxActionsPerHour: 2}", "maxActionsPerHour: 1}", 1))
    for job_id, nodes in {"40": ("node1", "node2"), "41": ("node3", "node4"), "42": ("node5", "node6")}.items():
        h.submit(job_id, "trainguard policy=watch", nodes=nodes)
    await h.step()
    for job_id in ("40", "41", "42"):
        await hardware_crash(h, job_id)

    windows = [(await h.outcomes(j))[0]["blast_radius"]["checks"][0]["in_window"] for j in ("40", "41", "42")]
    assert windows == [0, 1, 1]  # 41 would have been blocked, so Action mode would not have counted it


async def _lemon_drain(h: scenario.Harness) -> None:
    """Two jobs on node5+node6 whose rank 1 (node6) hits Xid 79: the second makes node6 a lemon."""
    for name in ("node5", "node6"):
        h.scheduler.nodes[name] = h.scheduler.nodes[name].model_copy(update={"partitions": ["debug", "small"]})
    h.submit("40", "trainguard policy=drain", nodes=("node5", "node6"))
    await h.step()
    await hardware_crash(h, "40")
    h.submit("41", "trainguard policy=drain", nodes=("node5", "node6"))
    await h.step()
    await hardware_crash(h, "41")


async def test_the_drained_share_is_per_partition_in_action_mode(make_harness: scenario.MakeHarness) -> None:
    """node6 is 1 of 6 nodes of the cluster (17 %) but 1 of 2 of partition ``small`` (50 % > 30 %): the
    drain is refused and recorded, the requeue the job needed is still carried out (degraded)."""
    h = await make_harness(policies=DRAINING.format(mode="Action"))
    await _lemon_drain(h)

    [advice] = await h.advice("41")
    assert advice["drain_nodes"] == ["node6"]
    assert not h.scheduler.nodes["node6"].drained
    assert "drain_node" not in h.mutations()
    [outcome] = await h.outcomes("41")
    assert outcome["disposition"] == "Converged"
    assert "degraded" in outcome["detail"] and "1 of 2 nodes of partition small (50%)" in outcome["detail"]
    assert outcome["blast_radius"]["would_block"] is False
    assert outcome["blast_radius"]["refused_drains"] == ["node6"]
    shares = {c["partition"]: (c["share"], c["would_block"]) for c in outcome["blast_radius"]["refused"]
              if c["limit"] == "maxDrainedShare"}
    assert shares == {"small": (0.5, True)}
    rows = {r.step: r for r in await h.store.actions_for(scenario.workload_of("41"), 0, 1)}
    assert rows["drain_node:node6"].status.value == "skipped"
    assert rows["drain_node:node6"].error.startswith("skipped: refused by a blast-radius limit: ")
    others = [r.status.value for name, r in rows.items() if not name.startswith("drain_node")]
    assert others == ["done"] * (len(rows) - 1)


async def test_the_drained_share_is_evaluated_and_recorded_in_monitor_mode(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness(policies=DRAINING.format(mode="Monitor"))
    await _lemon_drain(h)

    assert h.scheduler.mutations == []
    [outcome] = await h.outcomes("41")
    assert outcome["disposition"] == "Monitored"
    assert outcome["blast_radius"]["would_block"] is False  # degraded: the requeue would still be carried out
    assert outcome["blast_radius"]["refused_drains"] == ["node6"]
    assert "partition small" in outcome["blast_radius"]["refused"][0]["reason"]
    assert "the drains would be refused" in outcome["detail"]


async def test_enough_nodes_left_counts_only_usable_nodes(make_harness: scenario.MakeHarness) -> None:
    """Four of six nodes cannot take work: excluding node2 would leave one usable node for a two-node job."""
    h = await make_harness()
    for name, state in {"node3": "IDLE+DRAIN", "node4": "DOWN", "node5": "IDLE+NOT_RESPONDING",
                        "node6": "MIXED+FAIL"}.items():
        h.scheduler.nodes[name] = h.scheduler.nodes[name].model_copy(
            update={"state": state, "drained": "DRAIN" in state, "reason": "a person's"})
    h.submit("40", nodes=("node1", "node2"))
    await h.step()
    await hardware_crash(h, "40")

    [advice] = await h.advice("40")
    assert advice["action"] == "requeue" and advice["exclusions"] == []
    assert any("would leave 1 of 2 nodes" in reason for reason in advice["reasons"])
    assert h.mutations("40") == ["requeue"]


async def test_a_person_hold_during_the_retry_backoff_is_left_alone(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("41", "trainguard policy=backoff")
    h.write("41", *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    await h.settle()
    h.scheduler.start("41", ["node1", "node2"])
    await h.step()
    h.write("41", *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    await h.settle()
    assert h.mutations("41") == ["requeue", "requeue_hold"]  # retry 2: held for the backoff

    h.scheduler.person_holds("41")  # scontrol hold by an operator, on top of ours
    await h.step(35)
    await h.engine.sweep()
    await h.recoveries()

    assert h.mutations("41") == ["requeue", "requeue_hold"]
    assert h.scheduler.jobs["41"].held
    assert [o["disposition"] for o in await h.outcomes("41")] == ["Converged", "Abandoned"]
    [record] = [r.payload for r in await h.records("41", vocab.AuditKind.WATCHDOG)]
    assert record["released_hold"] is False and "JobHeldAdmin" in record["left_human_hold"]
    rows = {r.step: r for r in await h.store.actions_for(scenario.workload_of("41"), 1, 2)}
    assert rows["release"].status is actions.ActionStatus.SKIPPED

    # and on a restart, the start-up recovery does not release it either
    await h.new_engine().recover()
    assert h.scheduler.jobs["41"].held and h.mutations("41") == ["requeue", "requeue_hold"]
    assert h.scheduler.jobs["41"].state is workloads.JobState.PENDING
