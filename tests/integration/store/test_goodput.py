"""Goodput accounting over crafted audit histories, on real SQLite, PostgreSQL and MariaDB.

Each history is written through the store's own write API (what the engine calls), then read by
``store.goodput`` and accounted by ``observe.goodput``; every expected split below is computed
by hand from the timestamps written.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from trainguard.cli import main as cli_main
from trainguard.model import actions, advice, anomalies, verdicts, vocab
from trainguard.observe import goodput
from trainguard.store import audit, database
from trainguard.store import goodput as facts_mod

T0 = 1_800_000_000.0
CRASH = "slurm/c/1"  # Action: crash after two checkpoints, requeued by us, completes
STALL = "slurm/c/2"  # Monitor: hang without checkpoint, requeued by a person, still running
SLOW = "slurm/c/3"   # a slowdown that completed: no failure
HANG = "slurm/c/4"   # Action: hang after one checkpoint, requeued by us, completes
NOW = T0 + 1560


def an_anomaly(symptom: str, category: str, onset: float, nodes: list[str]) -> anomalies.Anomaly:
    return anomalies.Anomaly(symptom=vocab.Symptom(symptom), category=vocab.Category(category),
                             suspect_nodes=nodes, first_seen_at=onset)


async def failure(store: audit.AuditStore, workload: str, *, symptom: str, category: str, onset: float,
                  recorded: float, nodes: list[str], advised: float, mode: str,
                  requeue: float | None = None, attribution: str = "hardware") -> None:
    await store.record_anomaly(workload=workload, attempt=0, anomaly=an_anomaly(symptom, category, onset, nodes),
                               at=recorded)
    verdict = verdicts.Verdict(attribution=vocab.Attribution(attribution), category=vocab.Category(category),
                               suspect_nodes=nodes)
    await store.record_verdict(workload=workload, attempt=0, verdict=verdict, at=recorded + 0.5)
    item = advice.Advice.model_validate({"workload": workload, "attempt": 0, "generation": 1, "action": "requeue",
                                         "mode": mode, "policy": "p"})
    await store.record_advice(item, at=advised)
    if requeue is not None:
        step = actions.ActionRecord(workload=workload, attempt=0, generation=1, step="requeue",
                                    operation=actions.Operation.REQUEUE_HOLD, args={"job_id": workload})
        await store.begin_action(step, at=requeue)
        await store.finish_action(workload=workload, attempt=0, generation=1, step="requeue",
                                  status=actions.ActionStatus.DONE, at=requeue + 1)


async def write_history(store: audit.AuditStore) -> None:
    await store.upsert_workload(workload=CRASH, scheduler="slurm", job_id="1", policy="gpu", comment="", at=T0)
    await store.record_attempt(workload=CRASH, attempt=0, at=T0, started_at=T0, state="RUNNING", nodes=["n1", "n2"])
    for saved in (T0 + 100, T0 + 300):
        await store.record_attempt(workload=CRASH, attempt=0, at=saved, checkpoint_saved=True, checkpoint_at=saved)
    await failure(store, CRASH, symptom="crash", category="gpu_xid_hardware", onset=T0 + 400, recorded=T0 + 410,
                  nodes=["n2"], advised=T0 + 415, mode="Action", requeue=T0 + 420)
    await store.record_attempt(workload=CRASH, attempt=0, at=T0 + 421, ended_at=T0 + 421, state="REQUEUED")
    await store.record_attempt(workload=CRASH, attempt=1, at=T0 + 480, started_at=T0 + 480, state="RUNNING",
                               nodes=["n1", "n3"])
    await store.record_attempt(workload=CRASH, attempt=1, at=T0 + 1480, ended_at=T0 + 1480, state="COMPLETED")

    await store.upsert_workload(workload=STALL, scheduler="slurm", job_id="2", policy="default", comment="", at=T0)
    await store.record_attempt(workload=STALL, attempt=0, at=T0, started_at=T0, state="RUNNING", nodes=["n4"])
    await failure(store, STALL, symptom="hang", category="progress_stalled", onset=T0 + 200, recorded=T0 + 290,
                  nodes=[], advised=T0 + 291, mode="Monitor", attribution="unknown")
    await store.record_attempt(workload=STALL, attempt=0, at=T0 + 500, ended_at=T0 + 500, state="REQUEUED")
    await store.record_attempt(workload=STALL, attempt=1, at=T0 + 560, started_at=T0 + 560, state="RUNNING",
                               nodes=["n4"])

    await store.upsert_workload(workload=SLOW, scheduler="slurm", job_id="3", policy="default", comment="", at=T0)
    await store.record_attempt(workload=SLOW, attempt=0, at=T0, started_at=T0, state="RUNNING", nodes=["n5"])
    await store.record_anomaly(workload=SLOW, attempt=0, at=T0 + 60, anomaly=an_anomaly(
        "straggler", "throughput_drop", T0 + 30, ["n5"]))
    await store.record_attempt(workload=SLOW, attempt=0, at=T0 + 100, ended_at=T0 + 100, state="COMPLETED")

    await store.upsert_workload(workload=HANG, scheduler="slurm", job_id="4", policy="gpu", comment="", at=T0)
    await store.record_attempt(workload=HANG, attempt=0, at=T0, started_at=T0, state="RUNNING", nodes=["n2", "n6"])
    await store.record_attempt(workload=HANG, attempt=0, at=T0 + 50, checkpoint_saved=True, checkpoint_at=T0 + 50)
    await failure(store, HANG, symptom="hang", category="progress_stalled", onset=T0 + 100, recorded=T0 + 190,
                  nodes=["n2"], advised=T0 + 190, mode="Action", requeue=T0 + 191)
    await store.record_attempt(workload=HANG, attempt=0, at=T0 + 192, ended_at=T0 + 192, state="REQUEUED")
    await store.record_attempt(workload=HANG, attempt=1, at=T0 + 251, started_at=T0 + 251, state="RUNNING",
                               nodes=["n1", "n6"])
    await store.record_attempt(workload=HANG, attempt=1, at=T0 + 351, ended_at=T0 + 351, state="COMPLETED")


async def accounts(db_url: str) -> list[goodput.AttemptAccount]:
    store = await database.open_store(db_url)
    try:
        await write_history(store)
        facts = await facts_mod.attempt_facts(store.sql_engine)
    finally:
        await store.close()
    return goodput.account(facts, now=NOW)


def by_key(rows: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    return {row[key]: row for row in rows}


SPLIT = ("work_lost_s", "detection_s", "decision_s", "action_s", "requeue_wait_s")


async def test_each_failure_is_split_into_consecutive_pieces(db_url: str) -> None:
    found = await accounts(db_url)
    failures = {(a.workload, a.attempt): a.failure for a in found if a.failure is not None}
    assert set(failures) == {(CRASH, 0), (STALL, 0), (HANG, 0)}  # the completed slowdown is no failure

    crash = failures[(CRASH, 0)]
    # checkpoint 300 -> onset 400 -> recorded 410 -> advice 415 -> requeue 420 -> next start 480
    assert tuple(getattr(crash, k) for k in SPLIT) == (100, 10, 5, 5, 60)
    assert (crash.lost_s, crash.repair_s, crash.checkpoint_basis, crash.requeued_by) == (
        180, 80, "checkpoint_line", "trainguard")
    assert (crash.category, crash.nodes, crash.estimate) == ("gpu_xid_hardware", ("n2",), "job_exit")
    assert crash.baseline_lost_s == 100 + 10 + goodput.DEFAULT_MANUAL_DELAY_S + 60

    stall = failures[(STALL, 0)]
    # no checkpoint: all 200 s since the start are lost; nobody of ours requeued: wait from the advice
    assert tuple(getattr(stall, k) for k in SPLIT) == (200, 90, 1, 0, 269)
    assert (stall.checkpoint_basis, stall.requeued_by, stall.estimate, stall.baseline_lost_s) == (
        "attempt_start", "other", "none", None)
    assert stall.nodes == ("n4",)  # no suspect named: the attempt's nodes

    hang = failures[(HANG, 0)]
    assert tuple(getattr(hang, k) for k in SPLIT) == (50, 90, 0, 1, 60)
    assert hang.estimate == "job_timeout"  # the job's own 600 s timeout, then a person
    assert hang.baseline_lost_s == 50 + 600 + goodput.DEFAULT_MANUAL_DELAY_S + 60

    productive = {(a.workload, a.attempt): a.productive_s for a in found}
    assert productive == {(CRASH, 0): 300, (CRASH, 1): 1000, (STALL, 0): 0, (STALL, 1): NOW - (T0 + 560),
                          (SLOW, 0): 100, (HANG, 0): 50, (HANG, 1): 100}
    for a in found:  # productive + lost is exactly the wall time up to the next attempt's start
        if a.failure is not None:
            nxt = {CRASH: 480, STALL: 560, HANG: 251}[a.workload]
            assert a.productive_s + a.failure.lost_s == nxt


async def test_rows_per_workload_category_node_and_policy(db_url: str) -> None:
    found = await accounts(db_url)
    per_workload = by_key(goodput.rows(found, by="workload"), "workload")
    crash = per_workload[CRASH]
    assert (crash["lost_seconds"], crash["productive_seconds"], crash["failures"], crash["attempts"]) == (
        180, 1300, 1, 2)
    assert (crash["mttr_seconds"], crash["mtbf_seconds"]) == (80, 1400)  # uptime 400 + 1000, one failure
    assert crash["goodput"] == round(1300 / 1480, 6)
    assert (crash["saved_seconds"], crash["estimate"]) == (100 + 10 + 1800 + 60 - 180, ["job_exit"])
    assert per_workload[SLOW]["lost_seconds"] == 0 and per_workload[SLOW]["mtbf_seconds"] is None
    assert per_workload[STALL]["baseline_lost_seconds"] is None and per_workload[STALL]["estimate"] == ["none"]

    per_category = by_key(goodput.rows(found, by="category"), "category")
    assert set(per_category) == {"gpu_xid_hardware", "progress_stalled"}
    stalled = per_category["progress_stalled"]
    assert (stalled["workload"], sorted(stalled["workloads"]), stalled["lost_seconds"]) == ("*", [STALL, HANG], 761)
    assert (stalled["detection_seconds"], stalled["requeue_wait_seconds"]) == (180, 329)
    assert (stalled["attempts"], stalled["goodput"], stalled["mtbf_seconds"], stalled["mttr_seconds"]) == (
        0, None, None, (360 + 151) / 2)

    per_node = by_key(goodput.rows(found, by="node"), "node")
    assert per_node["n2"]["lost_seconds"] == 180 + 201  # both suspects named n2
    assert per_node["n2"]["failures"] == 2 and per_node["n1"]["failures"] == 0
    per_policy = by_key(goodput.rows(found, by="policy"), "policy")
    assert (per_policy["gpu"]["lost_seconds"], per_policy["default"]["lost_seconds"]) == (381, 560)
    assert per_policy["gpu"]["mttr_seconds"] == (80 + 151) / 2


async def test_since_keeps_attempts_that_ran_after_it(db_url: str) -> None:
    store = await database.open_store(db_url)
    try:
        await write_history(store)
        facts = await facts_mod.attempt_facts(store.sql_engine, since=audit.to_datetime(T0 + 400))
    finally:
        await store.close()
    assert sorted((f.workload, f.attempt) for f in facts) == [(CRASH, 0), (CRASH, 1), (STALL, 0), (STALL, 1)]


def test_cli_prints_one_json_row_per_group(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("the CLI is the same over every backend; the accounting is tested on each above")
    asyncio.run(accounts(db_url))
    assert cli_main.main(["goodput", "--db", db_url, "--format", "json", "--manual-delay", "600"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["workload"]: r["lost_seconds"] for r in rows} == {CRASH: 180, STALL: 560, SLOW: 0, HANG: 201}
    assert by_key(rows, "workload")[CRASH]["baseline_lost_seconds"] == 100 + 10 + 600 + 60
    assert cli_main.main(["goodput", "--db", db_url, "--by", "category"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["category", "failures", "productive"]
    assert table[1].split()[0] == "progress_stalled"
