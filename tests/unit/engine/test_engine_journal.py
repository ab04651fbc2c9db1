"""The signal journal end to end in the engine: recorded, replayed exactly, backtested, from the CLI.

(Every other engine scenario's journal is checked for the replay property too, after the test:
``conftest.make_harness`` calls ``tests.support.journal_replay.check``.)
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.support import journal_replay
from tests.unit.engine import scenario
from trainguard.cli import main as cli_main
from trainguard.journal import backtest, entries
from trainguard.policy import loader
from trainguard.store import journal as journal_store

STRICTER = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: act}
spec:
  mode: Action
  retries: {maxRetries: 0}
  detection: {settle: 1s, hangTimeout: 60s}
"""
"""The ``act`` policy changed: no retries at all (a hardware crash is stopped, not requeued)."""

NO_EXCLUSION_LIMITED = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: act}
spec:
  mode: Action
  retries: {maxRetries: 3, maxAttemptsWithoutCheckpoint: 10, backoff: {initialSeconds: 0}}
  detection: {settle: 1s, hangTimeout: 60s}
  blastRadius: {maxActionsPerHour: 1}
"""


async def _two_hardware_crashes(make_harness: scenario.MakeHarness) -> scenario.Harness:
    h = await make_harness()
    for job_id, node in (("20", "node2"), ("21", "node4")):
        h.submit(job_id, nodes=("node1", node) if job_id == "20" else ("node3", node))
        h.write(job_id, *scenario.ranked(0, "iteration 1 loss 2.3"), *scenario.ranked(1, "iteration 1 loss 2.3"))
    await h.step()
    for job_id in ("20", "21"):
        h.write(job_id, *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()
    return h


def _journal(h: scenario.Harness) -> journal_store.JournalStore:
    return journal_store.JournalStore(h.store.sql_engine, retention_s=1e9, max_bytes=10**9)


async def test_each_decision_is_journaled_with_its_inputs_and_replays_exactly(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await _two_hardware_crashes(make_harness)

    counts = await journal_replay.check(h.store)

    assert counts["advice"] == counts["audit_advice"] == 2
    assert counts["audit_verdicts"] == 2 and counts["audit_anomalies"] == 2
    rows = await _journal(h).read(workload=scenario.workload_of("20"))
    kinds = [r.kind for r in rows]
    assert kinds[0] == entries.SNAPSHOT and entries.VERDICT in kinds and entries.ADVICE in kinds
    # progress thinned: the two "iteration 1" lines of one round are one sample
    [progress] = [entries.ProgressEntry.model_validate(r.payload) for r in rows if r.kind == entries.PROGRESS]
    assert progress.sample.text.endswith("iteration 1 loss 2.3")
    [advice] = [entries.AdviceEntry.model_validate(r.payload) for r in rows if r.kind == entries.ADVICE]
    assert advice.advice.exclude_nodes == ["node2"]
    assert advice.attribution.anomaly.evidence[0].pattern  # the matched line keeps its pattern id
    assert any(s.name for s in advice.attribution.node_evidence.sources)  # the evidence sources it used
    assert scenario.START <= advice.at < scenario.START + 60


async def test_the_same_policy_backtests_to_no_difference(make_harness: scenario.MakeHarness) -> None:
    h = await _two_hardware_crashes(make_harness)

    rows, summary = backtest.run(await backtest.load(_journal(h)), h.engine.policies)

    assert rows == []
    assert (summary["decisions"], summary["changed_decisions"], summary["workloads_affected"]) == (2, 0, 0)


async def test_a_stricter_policy_shows_stop_instead_of_retry_and_the_removed_requeues(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await _two_hardware_crashes(make_harness)

    rows, summary = backtest.run(await backtest.load(_journal(h)), loader.parse_text(STRICTER, "new"))

    assert [(r["workload"], r["attempt"], r["recorded"], r["replayed"]) for r in rows] == [
        (scenario.workload_of("20"), 0, "requeue", "stop"), (scenario.workload_of("21"), 0, "requeue", "stop")]
    assert rows[0]["stop_vs_retry"] == "requeue -> stop"
    assert (rows[0]["recorded_exclusions"], rows[0]["replayed_exclusions"]) == (["node2"], [])
    assert (summary["removed_requeues"], summary["extra_requeues"], summary["workloads_affected"]) == (2, 0, 2)
    assert (summary["nodes_excluded_recorded"], summary["nodes_excluded_replayed"]) == (["node2", "node4"], [])


async def test_a_blast_radius_limit_shows_what_it_would_have_blocked(make_harness: scenario.MakeHarness) -> None:
    h = await _two_hardware_crashes(make_harness)

    rows, summary = backtest.run(await backtest.load(_journal(h)), loader.parse_text(NO_EXCLUSION_LIMITED, "new"))

    [blocked] = rows
    assert blocked["replayed"] == "requeue" and blocked["blocked_by"].startswith("blast radius: 1 operations")
    assert summary["blocked_by_limits"] == 1


async def test_backtest_cli_json_rows_then_one_summary_object(
    make_harness: scenario.MakeHarness, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    await _two_hardware_crashes(make_harness)
    policy = tmp_path / "new.yaml"
    policy.write_text(STRICTER, encoding="utf-8")
    db = f"sqlite+aiosqlite:///{tmp_path / 'audit0.db'}"

    code = await asyncio.to_thread(cli_main.main, ["backtest", "--policy", str(policy), "--db", db, "--format", "json",
                          "--workload", scenario.workload_of("21")])

    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    *rows, summary = lines
    assert [(r["workload"], r["attempt"], r["recorded"], r["replayed"]) for r in rows] == [
        (scenario.workload_of("21"), 0, "requeue", "stop")]
    assert all("summary" not in r for r in rows)
    assert summary["summary"] is True and summary["decisions"] == 1 and summary["notes"]

    assert await asyncio.to_thread(
        cli_main.main, ["backtest", "--policy", str(policy), "--db", db, "--until", "2000-01-01T00:00:00Z"]) == 0
    assert "0 decisions of 0 workloads replayed" in capsys.readouterr().out
