"""Lemon-node memory: incidents per (workload, attempt), windows, retention, bounds."""

from __future__ import annotations

from trainguard.attribute import lemon
from trainguard.model import vocab

T0 = 1_700_000_000.0
DAY = 86400.0


def _record(history: lemon.NodeHistory, node: str, at: float, workload: str, attempt: int = 0) -> lemon.NodeHistory:
    return lemon.record(
        history,
        [node],
        at=at,
        workload=workload,
        attempt=attempt,
        category=vocab.Category.ECC_MEMORY,
        retention_s=30 * DAY,
    )


def test_incidents_are_distinct_workload_attempts_in_the_window() -> None:
    history = lemon.NodeHistory()
    history = _record(history, "n1", T0, "a")
    history = _record(history, "n1", T0 + 10, "a")
    history = _record(history, "n1", T0 + 20, "a", attempt=1)
    history = _record(history, "n1", T0 + 30, "b")
    history = _record(history, "n2", T0 + 30, "b")
    assert history.incidents("n1", now=T0 + 60, window_s=DAY) == 3
    assert history.workloads("n1", now=T0 + 60, window_s=DAY) == 2
    assert history.incidents("n1", now=T0 + 60, window_s=DAY, exclude=("b", 0)) == 2
    assert history.incidents("n1", now=T0 + 25 + DAY, window_s=DAY) == 1
    assert history.incidents("n1", now=T0 - 1, window_s=DAY) == 0


def test_record_drops_old_entries_and_is_pure() -> None:
    old = _record(lemon.NodeHistory(), "n1", T0, "a")
    new = _record(old, "n2", T0 + 31 * DAY, "b")
    assert [item.node for item in old.implications] == ["n1"]
    assert [item.node for item in new.implications] == ["n2"]


def test_per_node_memory_is_bounded() -> None:
    history = lemon.NodeHistory()
    for index in range(lemon.MAX_PER_NODE + 10):
        history = _record(history, "n1", T0 + index, f"w{index}")
    assert len(history.implications) == lemon.MAX_PER_NODE
    assert history.implications[0].workload == "w10"


def test_json_round_trip() -> None:
    history = _record(lemon.NodeHistory(), "n1", T0, "a")
    assert lemon.NodeHistory.model_validate_json(history.model_dump_json()) == history
