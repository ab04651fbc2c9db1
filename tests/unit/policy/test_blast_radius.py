"""Blast-radius breaker: actions per rolling hour, and the share of each partition we drained."""

from __future__ import annotations

from trainguard.model import advice, limits, vocab, workloads
from trainguard.policy import blast_radius, model

NOW = 1_700_000_000.0
DEBUG = [workloads.NodeSnapshot(name=f"n{i}", state="IDLE", partitions=["debug"]) for i in range(8)]
SMALL = [workloads.NodeSnapshot(name=f"s{i}", state="IDLE", partitions=["debug", "small"]) for i in range(2)]
NODES = DEBUG + SMALL
"""Ten nodes in ``debug``; two of them (s0, s1) also form the partition ``small``."""


def _advice(action: vocab.AdviceAction = vocab.AdviceAction.REQUEUE, drain: list[str] | None = None) -> advice.Advice:
    return advice.Advice(workload="w", attempt=0, generation=1, action=action, drain_nodes=drain or [])


def _spec(per_hour: int = 20, share: float = 0.1) -> model.RecoveryPolicySpec:
    return model.RecoveryPolicySpec(
        blast_radius=model.BlastRadius(max_actions_per_hour=per_hour, max_drained_share=share)
    )


def _evaluate(spec: model.RecoveryPolicySpec, item: advice.Advice, *, recent: list[tuple[float, str]] | None = None,
              nodes: list[workloads.NodeSnapshot] | None = None, ours: tuple[str, ...] = ()) -> limits.LimitReport:
    return blast_radius.evaluate(spec, advice=item, recent_actions=recent or [],
                                 nodes=NODES if nodes is None else nodes, drained_by_us=ours, now=NOW, counted="test")


def test_nothing_to_do_is_never_blocked() -> None:
    report = _evaluate(_spec(per_hour=0), _advice(vocab.AdviceAction.NONE), nodes=[])
    assert report.reason is None and report.checks == [] and not report.would_block


def test_actions_per_hour_counts_only_the_last_hour_and_reports_its_figures() -> None:
    recent = [(NOW - 3600.0, "requeue"), (NOW - 3599.0, "requeue"), (NOW - 10, "stop")]
    allowed = _evaluate(_spec(per_hour=3), _advice(), recent=recent)
    assert allowed.reason is None
    [check] = allowed.checks
    assert (check.limit, check.maximum, check.in_window, check.planned, check.would_block) == (
        "maxActionsPerHour", 3, 2, 1, False)

    blocked = _evaluate(_spec(per_hour=2), _advice(), recent=recent)
    assert blocked.reason == "blast radius: 2 operations in the last hour + 1 planned > maxActionsPerHour 2"
    assert blocked.payload() == {
        "would_block": True, "reason": blocked.reason, "counted": "test",
        "checks": [{"limit": "maxActionsPerHour", "maximum": 2.0, "planned": 1, "in_window": 2, "would_block": True,
                    "reason": blocked.reason}],
    }


def test_future_entries_are_ignored() -> None:
    assert _evaluate(_spec(per_hour=1), _advice(), recent=[(NOW + 5, "requeue")]).reason is None


def test_zero_per_hour_blocks_everything() -> None:
    reason = _evaluate(_spec(per_hour=0), _advice(vocab.AdviceAction.STOP)).reason
    assert reason is not None and "maxActionsPerHour 0" in reason


def test_drains_count_as_operations_and_against_the_share() -> None:
    assert blast_radius.planned_operations(_advice(drain=["n1", "n2"])) == 3
    assert _evaluate(_spec(share=0.2), _advice(drain=["n1"]), ours=("n2",)).reason is None
    too_many = _evaluate(_spec(share=0.2), _advice(drain=["n1"]), ours=("n2", "n3")).reason
    assert too_many is not None
    assert "3 of 10 nodes of partition debug (30%)" in too_many and "maxDrainedShare 20%" in too_many


def test_the_drained_share_is_per_partition_of_the_node() -> None:
    """s1 is 1 of 10 nodes of ``debug`` (10 %) but 1 of 2 of ``small`` (50 %): ``small`` decides."""
    report = _evaluate(_spec(share=0.3), _advice(drain=["s1"]))
    by_partition = {c.partition: c for c in report.checks if c.limit == limits.DRAINED_SHARE}
    assert set(by_partition) == {"debug", "small"}
    debug, small = by_partition["debug"], by_partition["small"]
    assert (debug.partition_nodes, debug.drained_by_us, debug.planned, debug.share, debug.would_block) == (
        10, 0, 1, 0.1, False)
    assert (small.partition_nodes, small.drained_by_us, small.planned, small.share, small.would_block) == (
        2, 0, 1, 0.5, True)
    assert report.reason == (
        "blast radius: draining s1 would put 1 of 2 nodes of partition small (50%) in our drain > maxDrainedShare 30%")
    # a node of debug only is judged against debug alone
    assert _evaluate(_spec(share=0.3), _advice(drain=["n1"]), ours=("s0",)).reason is None


def test_our_drains_elsewhere_do_not_count_and_a_node_already_ours_is_not_counted_twice() -> None:
    report = _evaluate(_spec(share=0.5), _advice(drain=["s1"]), ours=("n1", "n2", "s1"))
    small = next(c for c in report.checks if c.partition == "small")
    assert (small.drained_by_us, small.planned, small.share) == (1, 0, 0.5)
    assert report.reason is None


def test_a_node_of_no_known_partition_blocks_drains_only() -> None:
    report = _evaluate(_spec(), _advice(drain=["elsewhere"]))
    assert report.reason == "blast radius: partition of elsewhere unknown, no node may be drained"
    assert _evaluate(_spec(), _advice(), nodes=[]).reason is None


def _decide(spec: model.RecoveryPolicySpec, item: advice.Advice, *, caps: limits.AdminCaps | None = None,
            recent: list[tuple[float, str]] | None = None, ours: tuple[str, ...] = (),
            nodes: list[workloads.NodeSnapshot] | None = None) -> limits.LimitReport:
    return blast_radius.decide(spec, advice=item, recent_actions=recent or [], nodes=NODES if nodes is None else nodes,
                               drained_by_us=ours, now=NOW, counted="test", caps=caps)


def test_a_refused_drain_degrades_to_the_requeue_and_records_the_refusal() -> None:
    report = _decide(_spec(share=0.3), _advice(drain=["s0"]))  # s0 is 1 of 2 nodes of ``small``: 50 % > 30 %
    assert report.reason is None and report.refused_drains == ["s0"]
    assert [c.limit for c in report.checks] == ["maxActionsPerHour"]  # the figures of what is carried out
    assert [(c.partition, c.would_block) for c in report.refused] == [("small", True)]
    assert report.payload()["refused_drains"] == ["s0"]


def test_no_degrade_when_the_requeue_itself_is_refused() -> None:
    report = _decide(_spec(per_hour=1), _advice(drain=["n0"]), recent=[(NOW - 5, "requeue")])
    assert report.reason is not None and report.refused_drains == []


def test_an_administrators_cap_is_above_a_lenient_policy_and_never_degrades() -> None:
    caps = limits.AdminCaps(actions_per_hour=3, nodes_out=1, nodes_out_share=0.5)
    spec = _spec(per_hour=10000, share=1.0)
    recent = [(NOW - 5, "requeue")] * 3
    report = _decide(spec, _advice(), caps=caps, recent=recent)
    assert report.breaker_reason == ("blast radius: 3 operations in the last hour + 1 planned > "
                                     "cluster cap max-actions-per-hour 3")
    drained = _decide(spec, _advice(drain=["n1"]), caps=caps, ours=("n0",))
    assert drained.refused_drains == [] and drained.breaker_reason is not None  # the breaker opens: no degrade
    assert "2 nodes out of service by us > cluster cap max-nodes-out 1" in drained.breaker_reason
    assert drained.payload()["breaker"] == drained.breaker_reason


def test_the_cap_on_the_share_counts_the_cluster_and_each_partition() -> None:
    caps = limits.AdminCaps(nodes_out_share=0.5)
    spec = _spec(share=1.0)
    small = _decide(spec, _advice(drain=["s1"]), caps=caps, ours=("s0",))  # 2 of 10 nodes, but 2 of 2 of small
    assert small.breaker_reason is not None and "partition small (100%)" in small.breaker_reason
    allowed = _decide(spec, _advice(drain=["n1"]), caps=caps, ours=("n0", "n2", "n3"))  # 4 of 10
    assert allowed.reason is None
    cluster = _decide(spec, _advice(drain=["n4", "n5"]), caps=caps, ours=("n0", "n1", "n2", "n3"))  # 6 of 10
    assert cluster.breaker_reason is not None and "nodes of the cluster (60%)" in cluster.breaker_reason


def test_a_kubernetes_workloads_exclusions_are_nodes_out_counted_per_node_pool() -> None:
    """On Kubernetes an exclusion cordons and taints the node for everyone: the administrator's caps on
    nodes out count it like a drain (a Slurm job's ExcNodeList they do not), in the node's pool (a
    node label)."""
    from trainguard.k8s.kubejobs import nodes as kube_nodes

    labelled = {"metadata": {"name": "g1", "labels": {kube_nodes.DEFAULT_POOL_LABEL: "a100"}}, "spec": {},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert kube_nodes.snapshot(labelled).partitions == ["a100"]
    assert kube_nodes.snapshot({**labelled, "metadata": {"name": "g2"}}).partitions == [kube_nodes.NO_POOL]
    pool = [workloads.NodeSnapshot(name=f"g{i}", state="IDLE", partitions=["a100"]) for i in range(4)]
    caps = limits.AdminCaps(nodes_out=1)
    k8s = advice.Advice(workload="k8s/team/JobSet/train", attempt=0, generation=1,
                        action=vocab.AdviceAction.REQUEUE, exclude_nodes=["g1", "g2"])
    assert k8s.nodes_taken_out == ["g1", "g2"]
    capped = _decide(_spec(share=1.0), k8s, caps=caps, nodes=pool)
    assert capped.breaker_reason is not None and "2 nodes out of service by us > cluster cap max-nodes-out 1" \
        in capped.breaker_reason
    pooled = _decide(_spec(share=1.0), k8s, caps=limits.AdminCaps(nodes_out_share=0.25), nodes=pool)
    assert pooled.breaker_reason is not None
    assert [c.share for c in pooled.checks if c.partition == "a100" and c.would_block] == [0.5]  # 2 of the pool's 4
    # the policy's maxDrainedShare is about its drains: an exclusion is the admin caps' to count
    assert _decide(_spec(share=0.1), k8s, nodes=pool).reason is None
    slurm = k8s.model_copy(update={"workload": "slurm/c/42"})
    assert slurm.nodes_taken_out == [] and _decide(_spec(share=0.25), slurm, caps=caps, nodes=pool).reason is None
