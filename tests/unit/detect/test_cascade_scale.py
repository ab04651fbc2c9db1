"""First cause among thousands of ranks' timeouts and tracebacks (static and live), on seeded logs.

``tests.support.cascade_logs`` writes a 4096-rank job's output where one rank dies (Xid 79, a
segfault, a kill) and every other rank prints watchdog timeouts, peer-gone errors and tracebacks,
shuffled, some lines sharing one line, some cut short, the failing rank's own lines arriving late.
Correctness only (no timing asserts); the whole module runs in a few seconds with Hyperscan.
"""

from __future__ import annotations

import functools
import io

import pytest

from tests.support import cascade_logs
from trainguard.detect import catalog, hosts, matcher, static, stream
from trainguard.model import anomalies, clock, signals, vocab

CASES = [(seed, kind) for seed, kind in zip((11, 12, 13), cascade_logs.KINDS, strict=True)]


_case = functools.lru_cache(maxsize=None)(cascade_logs.cascade_log)


@pytest.fixture(scope="module")
def compiled() -> matcher.Matcher:
    return matcher.build_matcher(catalog.load_builtin(), engine="auto")


def _expect_suspects(case: cascade_logs.Cascade, nodes: list[str], ranks: list[int]) -> None:
    assert nodes == [case.node]
    if case.kind != "xid":  # the kernel's Xid line names the node, not a rank
        assert ranks == [case.rank]


@pytest.mark.parametrize(("seed", "kind"), CASES)
def test_static_detect_names_the_rank_that_died_first(compiled: matcher.Matcher, seed: int, kind: str) -> None:
    case = _case(seed, kind=kind)
    data = "\n".join(case.lines).encode()
    result = static.FileAnalyzer(compiled, stream.DetectionSettings()).analyze("job.out", io.BytesIO(data))
    assert (result.symptom, result.category.value) == (vocab.Symptom.CRASH, case.category)
    assert result.evidence[0].text in case.lines[case.cause_at : case.cause_at + 2]
    _expect_suspects(case, result.suspect_nodes, result.suspect_ranks)


def _live(compiled: matcher.Matcher, case: cascade_logs.Cascade, seconds_per_line: float) -> list[anomalies.Anomaly]:
    now = clock.ManualClock(start=1_700_000_000.0)
    detector = stream.WorkloadDetector(
        compiled,
        stream.DetectionSettings(settle_s=30.0),
        now,
        workload="slurm/big/1",
        attempt=0,
        rank_map=hosts.RankMap(cascade_logs.nodes(4096), cascade_logs.TASKS_PER_NODE),
    )
    found: list[anomalies.Anomaly] = []
    for lineno, text in enumerate(case.lines, start=1):
        found += detector.feed(signals.LogLine(text=text, lineno=lineno, received_at=now.now(), source="stdout"))
        now.advance(seconds_per_line)
    now.advance(60.0)
    found += detector.tick()
    return [a for a in found if a.symptom != vocab.Symptom.STRAGGLER]


@pytest.mark.parametrize(("seed", "kind"), CASES)
def test_live_cause_arriving_late_inside_the_settle_window(compiled: matcher.Matcher, seed: int, kind: str) -> None:
    """The failing rank's lines come after 70 % of the cascade but within the settle window: one
    crash anomaly, naming the right cause, rank and node."""
    case = _case(seed, kind=kind)
    found = _live(compiled, case, seconds_per_line=0.0005)
    assert [a.category.value for a in found] == [case.category]
    _expect_suspects(case, found[0].suspect_nodes, found[0].suspect_ranks)


@pytest.mark.parametrize(("seed", "kind"), CASES)
def test_live_cause_arriving_after_the_settle_window(compiled: matcher.Matcher, seed: int, kind: str) -> None:
    """The cascade settles first (a hang on the timeouts); the failing rank's lines arrive later and
    a second anomaly of the stronger class names the right cause."""
    case = _case(seed, kind=kind)
    found = _live(compiled, case, seconds_per_line=0.01)
    assert len(found) == 2
    assert found[-1].category.value == case.category
    _expect_suspects(case, found[-1].suspect_nodes, found[-1].suspect_ranks)


def test_the_generator_is_deterministic() -> None:
    assert cascade_logs.cascade_log(5, world=64).lines == cascade_logs.cascade_log(5, world=64).lines
    assert cascade_logs.cascade_log(5, world=64).lines != cascade_logs.cascade_log(6, world=64).lines
