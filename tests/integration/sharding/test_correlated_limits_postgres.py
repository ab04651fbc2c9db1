"""Limits that hold when failures come together: two replicas, one PostgreSQL, many jobs failing at once.

Each replica is a real ``Engine.run`` with its own connection pool to the same real PostgreSQL
database and its own shards (``--shards``); the scheduler is the test suite's in-memory
``FakeScheduler``, shared by both like one cluster (as in ``test_sharding_postgres``). Eight jobs
spread over both replicas' shards crash in the same instant under ``maxActionsPerHour: 2``: the
limit check and the reservation of what it allows are one serialised decision in the store
(``store.ledger``), so exactly two recoveries are carried out, whichever replica decides them. Before,
each replica (and each workload task) counted only completed action rows and several passed together.

Also here, on the same real database: an administrator's cap opens the latched breaker, which every
step then sees (``ActionSwitch.blocked``), and only a person's reset closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from tests.support import fake_scheduler, postgres
from trainguard import engine as engine_mod
from trainguard import settings as settings_mod
from trainguard import shards
from trainguard.act import switch
from trainguard.detect import catalog as catalog_mod
from trainguard.model import clock, vocab, workloads
from trainguard.policy import loader
from trainguard.store import audit, database

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

POLICY = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: act}
spec:
  mode: Action
  retries: {maxRetries: 3, maxAttemptsWithoutCheckpoint: 10, backoff: {initialSeconds: 0}}
  exclusion: {lemonNodeThreshold: 1000}
  blastRadius: {maxActionsPerHour: PER_HOUR}
"""
SHARDS = 4
JOBS = 8
WAIT_S = 90.0
TRACEBACK = ("Traceback (most recent call last):", '  File "train.py", line 10, in <module>',
             "ValueError: shapes (4,) and (5,) not aligned")
TIMING = shards.Timing(lease_duration_s=3.0, renew_deadline_s=2.0, renew_interval_s=0.3)
SETTINGS = settings_mod.EngineSettings(discovery_interval_s=0.3, tail_interval_s=0.25, sweep_interval_s=1.0,
                                       allow_action=True)

Start = Callable[..., "asyncio.Future[tuple[engine_mod.Engine, audit.AuditStore]]"]


@pytest.fixture
def db_url(postgres_url: str) -> Iterator[str]:
    with postgres.scratch_database(postgres_url, "tg_limits") as url:
        yield url


def a_cluster(tmp_path: Path) -> fake_scheduler.FakeScheduler:
    scheduler = fake_scheduler.FakeScheduler(nodes=[f"node{i}" for i in range(1, 9)])
    for n in range(JOBS):
        job_id = str(100 + n)
        out = tmp_path / f"{job_id}.out"
        out.write_text("step 1\n")
        scheduler.jobs[job_id] = workloads.JobSnapshot(
            workload=f"slurm/test/{job_id}", job_id=job_id, name=f"train-{job_id}", state=workloads.JobState.RUNNING,
            nodes=[f"node{n + 1}"], comment="trainguard policy=act", partition=f"p{n}", stdout_path=str(out))
    return scheduler


@pytest.fixture
async def start(db_url: str) -> AsyncIterator[Start]:
    catalog = catalog_mod.load_catalog()
    running: list[tuple[audit.AuditStore, asyncio.Task[None], asyncio.Event]] = []

    async def make(name: str, scheduler: fake_scheduler.FakeScheduler, *, per_hour: int = 2,
                   settings: settings_mod.EngineSettings = SETTINGS) -> tuple[engine_mod.Engine, audit.AuditStore]:
        store = await database.open_store(db_url)
        spec = shards.ShardSpec(SHARDS, "partition", name)
        ownership = shards.Ownership(spec, shards.StoreLeases(store, spec, clock.SystemClock(), timing=TIMING))
        policies = loader.parse_text(POLICY.replace("PER_HOUR", str(per_hour)), "test")
        engine = engine_mod.Engine(scheduler, store, policies, catalog, clock_=clock.SystemClock(),
                                   settings=settings, shards=ownership)
        stop = asyncio.Event()
        running.append((store, asyncio.ensure_future(engine.run(stop)), stop))
        return engine, store

    yield make  # type: ignore[misc]
    for store, task, stop in running:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=60)
        await store.close()


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for ``condition`` (checked every 0.1 s); the deadline only bounds a failing test."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.1)


def crash_all(scheduler: fake_scheduler.FakeScheduler, tmp_path: Path) -> None:
    """Every job prints a traceback and fails, all in the same instant."""
    for job_id in list(scheduler.jobs):
        with (tmp_path / f"{job_id}.out").open("a") as out:
            out.write("".join(f"0: {line}\n" for line in TRACEBACK))
    for job_id, job in list(scheduler.jobs.items()):
        scheduler.jobs[job_id] = job.model_copy(update={"state": workloads.JobState.FAILED, "exit_code": 1})


async def outcomes(store: audit.AuditStore) -> dict[str, dict[str, object]]:
    return {r.workload: dict(r.payload) for r in await store.audit_records(kind=vocab.AuditKind.OUTCOME)}


async def test_jobs_failing_together_on_two_replicas_stay_within_max_actions_per_hour(
    tmp_path: Path, start: Start,
) -> None:
    scheduler = a_cluster(tmp_path)
    a, store = await start("replica-a", scheduler)
    b, _ = await start("replica-b", scheduler)
    everything = {job.workload for job in scheduler.jobs.values()}
    await until(lambda: set(a.runtimes) | set(b.runtimes) == everything and set(a.runtimes) and set(b.runtimes),
                "both replicas hold shards and every workload is tracked")

    crash_all(scheduler, tmp_path)
    seen: dict[str, dict[str, object]] = {}

    async def refresh() -> None:
        seen.update(await outcomes(store))

    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while len(seen) < JOBS:
        assert loop.time() < deadline, f"outcomes of {sorted(seen)} only"
        await refresh()
        await asyncio.sleep(0.2)

    requeued = {target for op, target, *_ in scheduler.mutating_calls() if op == "requeue"}
    assert len(requeued) == 2, scheduler.mutating_calls()
    dispositions = sorted(str(p["disposition"]) for p in seen.values())
    assert dispositions == ["Abandoned"] * (JOBS - 2) + ["Converged"] * 2
    blocked = [p for p in seen.values() if p["disposition"] == "Abandoned"]
    assert all("maxActionsPerHour 2" in str(p["detail"]) for p in blocked)
    counted = [p["blast_radius"] for p in blocked]
    assert all("in flight" in str(c["counted"]) for c in counted)  # type: ignore[index]


async def test_an_administrators_cap_opens_the_breaker_until_a_person_resets_it(tmp_path: Path, start: Start) -> None:
    scheduler = a_cluster(tmp_path)
    capped = settings_mod.EngineSettings(discovery_interval_s=0.3, tail_interval_s=0.25, sweep_interval_s=1.0,
                                         allow_action=True, max_actions_per_hour=3)
    a, store = await start("replica-a", scheduler, per_hour=100, settings=capped)
    everything = {job.workload for job in scheduler.jobs.values()}
    await until(lambda: set(a.runtimes) == everything, "every workload is tracked")
    assert await a.recovery.switch.blocked() is None

    crash_all(scheduler, tmp_path)
    seen: dict[str, dict[str, object]] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while len(seen) < JOBS:
        assert loop.time() < deadline, f"outcomes of {sorted(seen)} only"
        seen.update(await outcomes(store))
        await asyncio.sleep(0.2)

    requeued = {target for op, target, *_ in scheduler.mutating_calls() if op == "requeue"}
    assert len(requeued) <= 3  # the policy allows 100, the cap 3; an open breaker stops even those in flight
    breaker = await store.control(switch.BREAKER)
    assert breaker is not None and breaker.value["open"] is True
    assert "cluster cap max-actions-per-hour 3" in breaker.value["reason"]
    blocked = await a.recovery.switch.blocked()
    assert blocked is not None and "breaker is open" in blocked
    tripped = [p for p in seen.values() if p["disposition"] == "Abandoned"]
    assert tripped and all("administrator's cap" in str(p["detail"]) for p in tripped)
    opened = [r for r in await store.audit_records(kind=vocab.AuditKind.ACTION)
              if r.payload.get("operation") == "breaker-open"]
    assert len(opened) == 1  # latched: opened once, not once per refusal
    metrics = a.metrics
    assert metrics.breaker_trips._value.get() == 1 and metrics.breaker_open._value.get() == 1

    # Latched: it stays open (a new decision is refused at its first step) until a person resets it.
    await store.set_control(switch.BREAKER, {"open": False, "reason": ""}, by="oncall", channel="cli",
                            at=clock.SystemClock().now(), payload={"operation": "breaker-reset", "status": "done"})
    assert await a.recovery.switch.blocked() is None
