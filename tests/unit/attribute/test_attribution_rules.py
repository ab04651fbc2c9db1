"""Built-in attribution rules: hints, rules that know better, cascades, lemon nodes."""

from __future__ import annotations

from typing import Any

import pytest

from trainguard.attribute import lemon, rules
from trainguard.model import anomalies, vocab

NOW = 1_700_000_000.0
DAY = 86400.0
RULE = lemon.LemonRule(threshold=3, window_s=7 * DAY)
C = vocab.Category
AT = vocab.Attribution


def _ev(category: C, line: int, node: str | None = None, **fields: Any) -> anomalies.Evidence:
    return anomalies.Evidence(
        line=line, text=f"line {line}", pattern="test.pattern", category=category, node=node, **fields
    )


def _anomaly(category: C, evidence: list[anomalies.Evidence], **fields: Any) -> anomalies.Anomaly:
    return anomalies.Anomaly(
        symptom=fields.pop("symptom", vocab.Symptom.CRASH), category=category, evidence=evidence, **fields
    )


def _attribute(anomaly: anomalies.Anomaly, history: lemon.NodeHistory | None = None, **kwargs: Any) -> Any:
    return rules.attribute(
        anomaly, node_history=history or lemon.NodeHistory(), lemon_rule=RULE, now=NOW, workload="w", **kwargs
    )


def test_hardware_xid_names_its_node() -> None:
    anomaly = _anomaly(
        C.GPU_XID_HARDWARE,
        [_ev(C.GPU_XID_HARDWARE, 3, "n2", xid=79)],
        attribution_hint=AT.HARDWARE,
        suspect_nodes=["n2"],
    )
    verdict = _attribute(anomaly)
    assert (verdict.attribution, verdict.category, verdict.suspect_nodes) == (AT.HARDWARE, C.GPU_XID_HARDWARE, ["n2"])
    assert verdict.confidence == rules.CONFIDENCE_XID
    assert verdict.source == "builtin"
    assert "hardware Xid 79 on n2" in verdict.reasons[0]


def test_hardware_xid_overrules_an_application_first_cause() -> None:
    anomaly = _anomaly(
        C.CUDA_ILLEGAL_MEMORY,
        [_ev(C.CUDA_ILLEGAL_MEMORY, 10, "n1", rank=4), _ev(C.GPU_XID_HARDWARE, 9, "n1", xid=48)],
        attribution_hint=AT.APPLICATION,
        suspect_nodes=["n1"],
    )
    verdict = _attribute(anomaly)
    assert verdict.attribution == AT.HARDWARE
    assert verdict.category == C.GPU_XID_HARDWARE


def test_application_xids_are_the_programs_fault() -> None:
    anomaly = _anomaly(C.GPU_XID_HARDWARE, [_ev(C.GPU_XID_HARDWARE, 1, "n1", xid=31)], attribution_hint=AT.HARDWARE)
    verdict = _attribute(anomaly)
    assert verdict.attribution == AT.APPLICATION
    assert "Xid 31 is usually the program's fault" in verdict.reasons[0]


@pytest.mark.parametrize("category", [C.OOM_GPU, C.OOM_HOST_KILLED, C.PYTHON_EXCEPTION, C.DATALOADER_KILLED])
def test_always_application_even_against_a_hint(category: C) -> None:
    verdict = _attribute(_anomaly(category, [_ev(category, 1, "n1")], attribution_hint=AT.SYSTEM))
    assert verdict.attribution == AT.APPLICATION
    assert verdict.confidence == rules.CONFIDENCE_RULE


def test_hint_first_then_table() -> None:
    hinted = _attribute(_anomaly(C.SEGFAULT, [_ev(C.SEGFAULT, 1, "n1")], attribution_hint=AT.SYSTEM))
    assert (hinted.attribution, hinted.confidence) == (AT.SYSTEM, rules.CONFIDENCE_HINT)
    table = _attribute(_anomaly(C.FILESYSTEM_IO, [_ev(C.FILESYSTEM_IO, 1, "n1")]))
    assert (table.attribution, table.confidence) == (AT.SYSTEM, rules.CONFIDENCE_TABLE)
    unknown = _attribute(_anomaly(C.SEGFAULT, [_ev(C.SEGFAULT, 1, "n1")], suspect_nodes=["n1"]))
    assert (unknown.attribution, unknown.suspect_nodes) == (AT.UNKNOWN, ["n1"])


def test_every_category_has_a_table_entry() -> None:
    assert set(rules.CATEGORY_ATTRIBUTION) == set(C)


def test_timeouts_only_is_an_unknown_cascade_without_suspects() -> None:
    evidence = [_ev(C.NCCL_TIMEOUT, line, f"n{line}", rank=line) for line in (1, 2, 3)]
    anomaly = _anomaly(C.NCCL_TIMEOUT, evidence, symptom=vocab.Symptom.HANG)
    verdict = _attribute(anomaly)
    assert (verdict.attribution, verdict.suspect_nodes, verdict.suspect_ranks) == (AT.UNKNOWN, [], [])
    assert verdict.confidence == rules.CONFIDENCE_CASCADE
    assert "(n1, n2, n3) are victims, not suspects" in verdict.reasons[0]


def test_cascade_keeps_the_rank_the_detector_found_lagging() -> None:
    evidence = [_ev(C.NCCL_TIMEOUT, line, f"n{line}", rank=line) for line in (1, 2, 3)]
    anomaly = _anomaly(C.NCCL_TIMEOUT, evidence, suspect_nodes=["n4"], suspect_ranks=[4])
    verdict = _attribute(anomaly)
    assert (verdict.attribution, verdict.suspect_nodes, verdict.suspect_ranks) == (AT.UNKNOWN, ["n4"], [4])
    assert verdict.confidence == rules.CONFIDENCE_CASCADE_NAMED


def test_a_first_cause_under_the_timeouts_wins() -> None:
    evidence = [
        _ev(C.NCCL_TIMEOUT, 5, "n1", rank=0),
        _ev(C.FILESYSTEM_IO, 7, "n3", rank=2, at=NOW - 20),
        _ev(C.NCCL_TIMEOUT, 9, "n2", rank=1),
    ]
    verdict = _attribute(_anomaly(C.NCCL_TIMEOUT, evidence, suspect_nodes=["n1", "n2"]))
    assert (verdict.attribution, verdict.category, verdict.suspect_nodes, verdict.suspect_ranks) == (
        AT.SYSTEM,
        C.FILESYSTEM_IO,
        ["n3"],
        [2],
    )


def test_healthy_is_none() -> None:
    verdict = _attribute(anomalies.Anomaly(symptom=vocab.Symptom.HEALTHY, category=C.NONE))
    assert (verdict.attribution, verdict.category, verdict.confidence) == (AT.NONE, C.NONE, 1.0)


def _history(node: str, count: int, start: float = NOW - DAY) -> lemon.NodeHistory:
    history = lemon.NodeHistory()
    for index in range(count):
        history = lemon.record(
            history,
            [node],
            at=start + index,
            workload=f"other{index}",
            attempt=0,
            category=C.ECC_MEMORY,
            retention_s=30 * DAY,
        )
    return history


def test_a_lemon_suspect_raises_confidence() -> None:
    anomaly = _anomaly(C.ECC_MEMORY, [_ev(C.ECC_MEMORY, 1, "n2")], attribution_hint=AT.HARDWARE, suspect_nodes=["n2"])
    plain = _attribute(anomaly, _history("n2", 1))
    assert plain.lemon_nodes == [] and plain.confidence == rules.CONFIDENCE_HINT
    lemony = _attribute(anomaly, _history("n2", 2))
    assert lemony.lemon_nodes == ["n2"]
    assert lemony.confidence == pytest.approx(rules.CONFIDENCE_HINT + rules.LEMON_BONUS)
    assert any("n2 is a lemon: implicated in 3 incidents (2 workloads) in 7d" in reason for reason in lemony.reasons)


def test_old_implications_do_not_make_a_lemon() -> None:
    anomaly = _anomaly(C.ECC_MEMORY, [_ev(C.ECC_MEMORY, 1, "n2")], attribution_hint=AT.HARDWARE, suspect_nodes=["n2"])
    assert _attribute(anomaly, _history("n2", 5, start=NOW - 8 * DAY)).lemon_nodes == []


def test_repeats_of_the_same_attempt_do_not_count_twice() -> None:
    history = lemon.record(
        lemon.NodeHistory(), ["n2"], at=NOW - 10, workload="w", attempt=0, category=C.ECC_MEMORY, retention_s=DAY
    )
    history = lemon.record(
        history, ["n2"], at=NOW - 5, workload="other", attempt=0, category=C.ECC_MEMORY, retention_s=DAY
    )
    anomaly = _anomaly(C.ECC_MEMORY, [_ev(C.ECC_MEMORY, 1, "n2")], attribution_hint=AT.HARDWARE, suspect_nodes=["n2"])
    assert _attribute(anomaly, history, attempt=0).lemon_nodes == []


def test_lemon_among_the_job_nodes_becomes_a_suspect_of_an_unknown_verdict() -> None:
    anomaly = _anomaly(C.SEGFAULT, [_ev(C.SEGFAULT, 1, None)])
    verdict = _attribute(anomaly, _history("n3", 3), job_nodes=["n1", "n3"])
    assert verdict.attribution == AT.UNKNOWN
    assert verdict.suspect_nodes == ["n3"] and verdict.lemon_nodes == ["n3"]
    assert "suspect although the evidence does not name it" in verdict.reasons[-1]


def test_lemon_job_node_is_not_added_when_the_cause_is_known() -> None:
    anomaly = _anomaly(C.PYTHON_EXCEPTION, [_ev(C.PYTHON_EXCEPTION, 1, "n1")], suspect_nodes=["n1"])
    verdict = _attribute(anomaly, _history("n3", 5), job_nodes=["n1", "n3"])
    assert verdict.suspect_nodes == ["n1"] and verdict.lemon_nodes == []


def test_throughput_drop_verdict_says_who_fell_behind_or_that_nobody_did() -> None:
    """A straggler's verdict names the slow rank's node from the anomaly, and says so; without one it
    says that no rank fell behind rather than only "no rule attributes it"."""
    named = _attribute(
        _anomaly(
            C.THROUGHPUT_DROP,
            [_ev(C.THROUGHPUT_DROP, 40, "n2", rank=1)],
            symptom=vocab.Symptom.STRAGGLER,
            suspect_nodes=["n2"],
            suspect_ranks=[1],
        ),
        job_nodes=["n1", "n2"],
        allocation=["n1", "n2"],
    )
    assert (named.attribution, named.suspect_nodes, named.suspect_ranks) == (AT.UNKNOWN, ["n2"], [1])
    assert named.reasons[0].startswith("throughput drop: rank 1 on n2 fell behind")
    nobody = _attribute(
        _anomaly(C.THROUGHPUT_DROP, [_ev(C.THROUGHPUT_DROP, 40)], symptom=vocab.Symptom.STRAGGLER),
        job_nodes=["n1", "n2"],
        allocation=["n1", "n2"],
    )
    assert (nobody.attribution, nobody.suspect_nodes) == (AT.UNKNOWN, [])
    assert "no rank or node fell behind the others, so none is suspect" in nobody.reasons[0]
