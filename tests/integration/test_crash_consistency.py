"""Crash consistency: kill the executor at every boundary, restart it, and check the result.

Each case runs ``crash_driver.py`` twice against the same database and the same file-backed
scheduler: first with a SIGKILL at one boundary, then to the end (a restarted operator).
Afterwards: exactly one effective scheduler action per step (the scheduler's own persisted
mutation log), a complete audit trail (advice, intent and result of every step, one
outcome), and no job left held. For SQLite, PostgreSQL and MySQL/MariaDB.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import fake_scheduler, mysql, postgres
from trainguard.model import actions, vocab, workloads
from trainguard.store import database

DRIVER = Path(__file__).with_name("crash_driver.py")
REPO = Path(__file__).resolve().parents[2]
WORKLOAD, JOB_ID = "slurm/crash/1001", "1001"
STEPS = ["requeue_hold", "exclude_nodes", "release"]
BOUNDARIES = ["advice", "intent:requeue_hold", "call:requeue_hold", "intent:exclude_nodes", "call:exclude_nodes",
              "call:release", "outcome"]

pytestmark = pytest.mark.integration


@pytest.fixture(params=[pytest.param("sqlite", id="sqlite"),
                        pytest.param("postgres", marks=pytest.mark.postgres, id="postgres"),
                        pytest.param("mysql", marks=pytest.mark.mysql, id="mysql")])
def crash_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}"
        return
    if request.param == "mysql":
        with mysql.scratch_database(request.getfixturevalue("mysql_server"), "tg_crash") as url:
            yield url
        return
    with postgres.scratch_database(request.getfixturevalue("postgres_url"), "tg_crash") as url:
        yield url


def drive(
    db: str, scheduler_file: Path, deadline: float, kill_at: str, *extra: str,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DRIVER), "--db", db, "--scheduler-file", str(scheduler_file),
         "--deadline", str(deadline), "--kill-at", kill_at, *extra],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )


async def audit_trail(db: str) -> tuple[list[dict[str, object]], list[actions.ActionRecord]]:
    store = await database.open_store(db, readonly=True)
    try:
        records = [r.to_json() for r in await store.audit_records(workload=WORKLOAD)]
        return records, await store.actions_for(WORKLOAD, 0, 1)
    finally:
        await store.close()


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_killed_executor_resumes_without_repeating(crash_db: str, tmp_path: Path, boundary: str):
    scheduler_file = tmp_path / "scheduler.json"
    job = workloads.JobSnapshot(workload=WORKLOAD, job_id=JOB_ID, state=workloads.JobState.FAILED, attempt=0,
                                nodes=["node1", "node2"], comment="trainguard", exit_code=1)
    fake_scheduler.FileFakeScheduler(scheduler_file, [job], ["node1", "node2", "node3"])
    deadline = time.time() + 600

    killed = drive(crash_db, scheduler_file, deadline, boundary)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    restarted = drive(crash_db, scheduler_file, deadline, "none")
    assert restarted.returncode == 0, restarted.stderr
    assert restarted.stdout.strip() == "Converged"

    state = fake_scheduler.FileFakeScheduler(scheduler_file)
    assert [m["operation"] for m in state.mutations] == STEPS  # each effective action exactly once
    final = state.jobs[JOB_ID]
    assert (final.attempt, final.held, final.excluded_nodes, final.state) == (
        1, False, ["node2"], workloads.JobState.PENDING)

    records, rows = asyncio.run(audit_trail(crash_db))
    kinds = [r["kind"] for r in records]
    assert kinds.count("advice") == 1 and kinds.count("outcome") == 1 and kinds[0] == "advice"
    assert records[-1]["kind"] == "outcome"
    assert records[-1]["payload"]["disposition"] == vocab.Disposition.CONVERGED.value  # type: ignore[index]
    assert [(r.step, r.status) for r in rows] == [(step, actions.ActionStatus.DONE) for step in STEPS]
    for step in STEPS:
        statuses = [r["payload"]["status"] for r in records  # type: ignore[index]
                    if r["kind"] == "action" and r["payload"]["step"] == step]  # type: ignore[index]
        assert statuses == ["intent", "done"], (step, statuses)
    assert "watchdog" not in kinds


def test_restart_after_the_deadline_releases_our_hold(crash_db: str, tmp_path: Path):
    scheduler_file = tmp_path / "scheduler.json"
    job = workloads.JobSnapshot(workload=WORKLOAD, job_id=JOB_ID, state=workloads.JobState.FAILED, attempt=0,
                                nodes=["node1", "node2"], comment="trainguard", exit_code=1)
    fake_scheduler.FileFakeScheduler(scheduler_file, [job], ["node1", "node2", "node3"])
    deadline = time.time() + 600

    assert drive(crash_db, scheduler_file, deadline, "call:requeue_hold").returncode == -signal.SIGKILL
    assert fake_scheduler.FileFakeScheduler(scheduler_file).jobs[JOB_ID].held  # killed while holding it
    restarted = drive(crash_db, scheduler_file, deadline, "none", "--clock-offset", "3600")
    assert restarted.returncode == 0, restarted.stderr
    assert restarted.stdout.strip() == "Abandoned"

    state = fake_scheduler.FileFakeScheduler(scheduler_file)
    assert [m["operation"] for m in state.mutations] == ["requeue_hold", "release"]
    assert not state.jobs[JOB_ID].held
    records, _ = asyncio.run(audit_trail(crash_db))
    watchdog_records = [r for r in records if r["kind"] == "watchdog"]
    assert len(watchdog_records) == 1 and watchdog_records[0]["payload"]["released_hold"] is True  # type: ignore[index]
    assert records[-1]["kind"] == "outcome"
    assert records[-1]["payload"]["disposition"] == vocab.Disposition.ABANDONED.value  # type: ignore[index]


ENGINE_DRIVER = Path(__file__).with_name("crash_engine_driver.py")
ENGINE_BOUNDARIES = ["advice", "call:requeue_hold", "intent:exclude_nodes", "call:release", "outcome", "pending"]
XID_LINE = "1: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."


def drive_engine(
    db: str, scheduler_file: Path, at: float, kill_at: str, *extra: str,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ENGINE_DRIVER), "--db", db, "--scheduler-file", str(scheduler_file), "--job-id", JOB_ID,
         "--clock", str(at), "--kill-at", kill_at, *extra],
        cwd=REPO, capture_output=True, text=True, timeout=180, check=False,
    )


@pytest.mark.parametrize("open_mode", ["append", "truncate"])
@pytest.mark.parametrize("boundary", ENGINE_BOUNDARIES)
@pytest.mark.slow(
    reason="a real job is failed, the engine killed at one step and restarted, and the new attempt run to its end")
def test_killed_engine_never_reads_the_old_attempt_into_the_new_one(
    crash_db: str, tmp_path: Path, boundary: str, open_mode: str
):
    """The whole engine, killed at each boundary of a hardware recovery, restarted while the requeued
    job is pending, then the job runs again (its output appended to, or truncated): the old Xid line
    is never charged to the new attempt, and every effective action happens exactly once."""
    scheduler_file = tmp_path / "scheduler.json"
    output = tmp_path / f"slurm-{JOB_ID}.out"
    output.write_text("\n".join(["0: iteration 6 loss 2.0", "1: iteration 6 loss 2.0", XID_LINE]) + "\n")
    job = workloads.JobSnapshot(workload=WORKLOAD, job_id=JOB_ID, state=workloads.JobState.RUNNING, attempt=0,
                                nodes=["node1", "node2"], comment="trainguard policy=act",
                                stdout_path=str(output))
    fake_scheduler.FileFakeScheduler(scheduler_file, [job], ["node1", "node2", "node3"])
    at = time.time()

    killed = drive_engine(crash_db, scheduler_file, at, boundary)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    pending = fake_scheduler.FileFakeScheduler(scheduler_file).jobs[JOB_ID]
    restarted = drive_engine(crash_db, scheduler_file, at + 10, "none")  # a restart; the job has not run again
    assert restarted.returncode == 0, restarted.stderr
    assert restarted.stdout.split() == STEPS, (pending, restarted.stderr[-3000:])
    again = drive_engine(crash_db, scheduler_file, at + 20, "none", "--start", open_mode)  # and once it runs
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == STEPS, again.stderr[-3000:]

    state = fake_scheduler.FileFakeScheduler(scheduler_file)
    final = state.jobs[JOB_ID]
    assert (final.attempt, final.held, final.excluded_nodes, final.state) == (
        1, False, ["node2"], workloads.JobState.RUNNING)
    records, rows = asyncio.run(audit_trail(crash_db))
    assert [(r["kind"], r["attempt"]) for r in records if r["kind"] in ("advice", "outcome")] == [
        ("advice", 0), ("outcome", 0)]
    assert records[[r["kind"] for r in records].index("outcome")]["payload"]["disposition"] == "Converged"
    assert [(r.step, r.status) for r in rows] == [(step, actions.ActionStatus.DONE) for step in STEPS]
    assert not [r for r in records if r["attempt"] not in (0, None)], "the new attempt was charged"
