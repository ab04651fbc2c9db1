"""`trainguard nodes` against a real database filled by the real store and executor paths (SQLite,
PostgreSQL, MySQL/MariaDB): the JSON contract of the list, show with history and evidence, a person's
hold and return recorded with who, and a refused decision that changes nothing."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from tests.support import fake_scheduler
from trainguard.act import executor
from trainguard.cli import main as cli
from trainguard.model import advice, clock, verdicts, vocab, workloads
from trainguard.store import database

W, JOB = "slurm/cli/11", "11"
T0 = 1_800_000_000.0
ISO_MICRO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$")


async def fill(url: str) -> None:
    """node2 named by a hardware verdict (suspect); node3 drained by our executor (out of service)."""
    store = await database.open_store(url)
    try:
        now = clock.ManualClock(T0)
        await store.upsert_workload(workload=W, scheduler="fake", job_id=JOB, at=T0)
        await store.record_attempt(workload=W, attempt=0, at=T0, nodes=["node1", "node2", "node3"])
        verdict = verdicts.Verdict(attribution=vocab.Attribution.HARDWARE, category=vocab.Category.ECC_MEMORY,
                                   suspect_nodes=["node2"])
        await store.record_verdict(workload=W, attempt=0, verdict=verdict, at=T0 + 0.5)
        job = workloads.JobSnapshot(workload=W, job_id=JOB, state=workloads.JobState.FAILED,
                                    nodes=["node1", "node2", "node3"])
        scheduler = fake_scheduler.FakeScheduler([job], ["node1", "node2", "node3"])
        item = advice.Advice(workload=W, attempt=0, generation=1, action=vocab.AdviceAction.STOP,
                             drain_nodes=["node3"], mode=vocab.Mode.ACTION, deadline=T0 + 300)
        await store.record_advice(item, at=T0 + 1)
        assert await executor.Executor(scheduler, store, now).reconcile(item) is vocab.Disposition.CONVERGED
    finally:
        await store.close()


def _json(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_nodes_json_lines_follow_the_contract_and_show_has_history(db_url: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(fill(db_url))
    assert cli.main(["nodes", "--db", db_url, "--format", "json"]) == 0
    lines = _json(capsys)
    assert [(x["node"], x["state"]) for x in lines] == [("node2", "suspect"), ("node3", "out-of-service")]
    for line in lines:
        assert {"node", "state", "reason", "since"} <= set(line)
        assert ISO_MICRO_UTC.match(str(line["since"])) and line["reason"] and line["workload"] == W
    assert "ecc_memory" in str(lines[0]["reason"]) and "drained by us" in str(lines[1]["reason"])

    assert cli.main(["nodes", "--db", db_url, "show", "node3", "--format", "json"]) == 0
    [shown] = _json(capsys)
    assert shown["state"] == "out-of-service"
    assert [h["event"] for h in shown["history"]] == ["taken-out"]  # type: ignore[union-attr]
    assert shown["history"][0]["evidence"] == {"step": "drain_node:node3"}  # type: ignore[index]

    assert cli.main(["nodes", "show", "node2", "--db", db_url]) == 0
    text = capsys.readouterr().out
    assert "node2: suspect" in text and "incident" in text and "ecc_memory" in text


def test_hold_and_return_are_a_persons_decisions_recorded_with_who(db_url: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(fill(db_url))
    assert cli.main(["nodes", "hold", "node3", "--db", db_url, "--reason", "ECC, ticket 9", "--by", "alice"]) == 0
    assert "held-for-repair (by alice)" in capsys.readouterr().out
    assert cli.main(["nodes", "list", "--db", db_url, "--format", "json"]) == 0
    held = {x["node"]: x for x in _json(capsys)}["node3"]
    assert (held["state"], held["by"], held["reason"]) == ("held-for-repair", "alice", "ECC, ticket 9")

    assert cli.main(["nodes", "return", "node3", "--db", db_url, "--reason", "DIMM replaced", "--by", "bob"]) == 0
    assert "next sweep" in capsys.readouterr().out
    assert cli.main(["nodes", "--db", db_url, "show", "node3", "--format", "json"]) == 0
    [shown] = _json(capsys)
    assert [(h["state"], h["by"]) for h in shown["history"]] == [  # type: ignore[union-attr]
        ("out-of-service", "trainguard"), ("held-for-repair", "alice"), ("out-of-service", "bob")]

    # node1 is in service (we never took it out): a hold is refused and nothing is written
    assert cli.main(["nodes", "hold", "node1", "--db", db_url, "--reason", "x", "--by", "eve"]) == 1
    assert "refused, nothing changed" in capsys.readouterr().err
    assert cli.main(["nodes", "--db", db_url, "--format", "json"]) == 0
    assert "node1" not in {x["node"] for x in _json(capsys)}
    assert cli.main(["audit", "--db", db_url, "--kind", "action", "--format", "json"]) == 0
    people = [x["payload"] for x in _json(capsys) if str(x["payload"].get("operation", "")).startswith("node-")]  # type: ignore[union-attr]
    assert [(p["operation"], p["by"]) for p in people] == [("node-held", "alice"), ("node-cleared", "bob")]


def test_nodes_of_a_missing_database_exits_1(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["nodes", "--db", db_url, "--format", "json"]) == 1
    assert "trainguard nodes:" in capsys.readouterr().err
