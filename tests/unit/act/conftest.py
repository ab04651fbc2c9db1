"""Fixtures for the executor and watchdog tests: a real SQLite audit store in tmp_path,
a ManualClock, and the in-memory FakeScheduler with one opted-in job on four nodes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support import fake_scheduler
from trainguard.act import executor
from trainguard.model import advice, clock, vocab, workloads
from trainguard.store import audit, database

WORKLOAD = "slurm/test/42"
JOB_ID = "42"
START = 1_800_000_000.0
NODES = ["node1", "node2", "node3", "node4"]


@pytest.fixture
def manual_clock() -> clock.ManualClock:
    return clock.ManualClock(START)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[audit.AuditStore]:
    opened = await database.open_store(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    await opened.upsert_workload(workload=WORKLOAD, scheduler="fake", job_id=JOB_ID, policy="default",
                                 comment="trainguard", at=START)
    yield opened
    await opened.close()


@pytest.fixture
def scheduler() -> fake_scheduler.FakeScheduler:
    job = workloads.JobSnapshot(workload=WORKLOAD, job_id=JOB_ID, state=workloads.JobState.FAILED, attempt=0,
                                nodes=["node1", "node2"], comment="trainguard", exit_code=1)
    return fake_scheduler.FakeScheduler([job], NODES)


@pytest.fixture
def make_executor(
    scheduler: fake_scheduler.FakeScheduler, store: audit.AuditStore, manual_clock: clock.ManualClock,
) -> executor.Executor:
    return executor.Executor(scheduler, store, manual_clock)


class AdviceFactory:
    """Builds an Advice for the test workload; ``advise(action, **fields)``."""

    def __call__(
        self, action: vocab.AdviceAction, *, mode: vocab.Mode = vocab.Mode.ACTION, attempt: int = 0,
        generation: int = 1, deadline: float | None = START + 300, **fields: object,
    ) -> advice.Advice:
        return advice.Advice.model_validate({
            "workload": WORKLOAD, "attempt": attempt, "generation": generation, "action": action, "mode": mode,
            "deadline": deadline, "reasons": ["test"], "policy": "default", **fields,
        })


@pytest.fixture
def advise() -> AdviceFactory:
    return AdviceFactory()
