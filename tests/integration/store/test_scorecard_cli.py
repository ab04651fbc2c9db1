"""`trainguard scorecard` on a real database (SQLite, PostgreSQL, MariaDB), without a scheduler: the
contract's JSON rows, the per-policy summary, the table, the filters and the exit codes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from trainguard.cli import main as cli
from trainguard.model import advice, verdicts, vocab
from trainguard.store import database

T0 = 1_800_000_000.0


async def fill(url: str) -> None:
    """Three Monitor-mode advice of policy ``p`` (one failed job left alone, one requeued by a person
    onto other nodes, one whose job completed on its own) and one Action-mode advice (not scored)."""
    store = await database.open_store(url)
    try:
        cases = (("1", "FAILED", None, vocab.Mode.MONITOR), ("2", "COMPLETED", ["node3", "node4"], vocab.Mode.MONITOR),
                 ("3", "COMPLETED", None, vocab.Mode.MONITOR), ("4", "FAILED", None, vocab.Mode.ACTION))
        for job, state, next_nodes, mode in cases:
            w = f"slurm/cli/{job}"
            await store.upsert_workload(workload=w, scheduler="slurm-local", job_id=job, at=T0, policy="p", state=state)
            first = "FAILED" if job != "3" else "COMPLETED"
            await store.record_attempt(workload=w, attempt=0, at=T0, started_at=T0, ended_at=T0 + 600, state=first,
                                       nodes=["node1", "node2"])
            verdict = verdicts.Verdict(attribution=vocab.Attribution.HARDWARE, category=vocab.Category.ECC_MEMORY,
                                       suspect_nodes=["node2"])
            await store.record_verdict(workload=w, attempt=0, verdict=verdict, at=T0 + 599)
            await store.record_advice(advice.Advice(workload=w, attempt=0, generation=1,
                                                    action=vocab.AdviceAction.REQUEUE, exclude_nodes=["node2"],
                                                    mode=mode, policy="p"), at=T0 + 600)
            if next_nodes:
                await store.record_attempt(workload=w, attempt=1, at=T0 + 1500, started_at=T0 + 1500,
                                           ended_at=T0 + 2000, state="COMPLETED", nodes=next_nodes)
    finally:
        await store.close()


def test_json_rows_and_summary(db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("TRAINGUARD_SCHEDULER", raising=False)
    asyncio.run(fill(db_url))

    assert cli.main(["scorecard", "--db", db_url, "--format", "json", "--gpus-per-node", "4"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    rows = {r["workload"]: r for r in lines if not r.get("summary")}
    assert set(rows) == {"slurm/cli/1", "slurm/cli/2", "slurm/cli/3"}  # the Action-mode advice is not scored
    for row in rows.values():
        assert {"workload", "attempt", "advice", "score", "detail", "evidence"} <= set(row)
        assert (row["attempt"], row["advice"], row["nodes"]) == (0, "requeue", ["node2"])
    assert (rows["slurm/cli/1"]["score"], rows["slurm/cli/1"]["detail"]) == ("would-have-helped",
                                                                           "ignored-job-stayed-down")
    two = rows["slurm/cli/2"]
    assert (two["score"], two["detail"], two["requeued_by"]) == ("agree", "requeued-avoiding-suspect", "person")
    assert two["gpu_hours_saved"] == pytest.approx(900 / 3600 * 2 * 4)  # a person's 15 min, 2 nodes x 4 GPUs
    three = rows["slurm/cli/3"]
    assert (three["score"], three["detail"], three["harmful"]) == ("disagree", "completed-without-action", True)
    [summary] = [r for r in lines if r.get("summary")]
    assert (summary["policy"], summary["advice"], summary["scored"], summary["harmful"]) == ("p", 3, 3, 1)
    assert summary["agreement_rate"] == pytest.approx(2 / 3, abs=1e-4)
    assert summary["ready_for_action"] is False
    assert summary["not_ready_because"] == ["only 3 scored advice (need 5)", "agreement 67% below 80%",
                                            "1 harmful advice"]

    assert cli.main(["scorecard", "--db", db_url, "--format", "json", "--policy-name", "other"]) == 0
    assert capsys.readouterr().out == ""
    assert cli.main(["scorecard", "--db", db_url, "--workload", "slurm/cli/1"]) == 0
    table = capsys.readouterr().out
    assert "slurm/cli/1 #0 gen 1  requeue would-have-helped" in table
    assert "policy p: 1 advice, 1 scored, agreement 100%" in table and "rule: ready when >= 5" in table


def test_a_missing_database_is_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert cli.main(["scorecard", "--db", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainguard scorecard: ") and "Traceback" not in err
