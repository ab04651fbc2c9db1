"""Two engine replicas sharing one PostgreSQL audit store split the workloads by shard (``shards.py``).

Each replica is a real ``Engine.run`` with its own connection pool to the same real PostgreSQL
database (as two processes would have); the scheduler is the test suite's in-memory
``FakeScheduler``, shared by both like one Slurm cluster. Shard leases are the store's database
leases, with short timings so that a takeover happens within seconds; every wait is on a condition.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import fake_scheduler, postgres
from trainguard import engine as engine_mod
from trainguard import settings as settings_mod
from trainguard import shards
from trainguard.detect import catalog as catalog_mod
from trainguard.model import actions, advice, clock, vocab, workloads
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
"""
SHARDS = 4
WAIT_S = 90.0
PARTITIONS = [f"p{i}" for i in range(10)]
JOBS = 40
TIMING = shards.Timing(lease_duration_s=3.0, renew_deadline_s=2.0, renew_interval_s=0.3)
SETTINGS = settings_mod.EngineSettings(discovery_interval_s=0.3, tail_interval_s=0.5, sweep_interval_s=1.0,
                                       allow_action=True)


@pytest.fixture
def db_url(postgres_url: str) -> Iterator[str]:
    with postgres.scratch_database(postgres_url, "tg_shards") as url:
        yield url


@dataclass
class Replica:
    name: str
    store: audit.AuditStore
    engine: engine_mod.Engine
    task: asyncio.Task[None]
    stop: asyncio.Event

    @property
    def ownership(self) -> shards.Ownership:
        assert self.engine.shards is not None
        return self.engine.shards

    def tracked(self) -> set[str]:
        return set(self.engine.runtimes)

    def held(self) -> set[int]:
        return set(self.ownership.leases.held())


def a_cluster(tmp_path: Path) -> fake_scheduler.FakeScheduler:
    scheduler = fake_scheduler.FakeScheduler(nodes=["node1", "node2", "node3", "node4"])
    for n in range(JOBS):
        job_id = str(100 + n)
        out = tmp_path / f"{job_id}.out"
        out.write_text("step 1\n")
        scheduler.jobs[job_id] = workloads.JobSnapshot(
            workload=f"slurm/test/{job_id}", job_id=job_id, name=f"train-{job_id}", state=workloads.JobState.RUNNING,
            nodes=["node1", "node2"], comment="trainguard policy=act", partition=PARTITIONS[n % len(PARTITIONS)],
            stdout_path=str(out))
    return scheduler


@pytest.fixture
async def start(db_url: str) -> AsyncIterator[Callable[[str, fake_scheduler.FakeScheduler], asyncio.Future[Replica]]]:
    catalog = catalog_mod.load_catalog()
    replicas: list[Replica] = []

    async def make(name: str, scheduler: fake_scheduler.FakeScheduler) -> Replica:
        store = await database.open_store(db_url)
        spec = shards.ShardSpec(SHARDS, "partition", name)
        ownership = shards.Ownership(spec, shards.StoreLeases(store, spec, clock.SystemClock(), timing=TIMING))
        engine = engine_mod.Engine(scheduler, store, loader.parse_text(POLICY, "test"), catalog,
                                   clock_=clock.SystemClock(), settings=SETTINGS, shards=ownership)
        stop = asyncio.Event()
        replica = Replica(name, store, engine, asyncio.ensure_future(engine.run(stop)), stop)
        replicas.append(replica)
        return replica

    yield make  # type: ignore[misc]
    for replica in replicas:
        replica.stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(replica.task, timeout=60)
        await replica.store.close()


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for ``condition`` (checked every 0.1 s); the deadline only bounds a failing test."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.1)


def follows_its_shards(replica: Replica, scheduler: fake_scheduler.FakeScheduler) -> bool:
    """The replica tracks exactly the workloads of the shards it holds."""
    spec = replica.ownership.spec
    held = replica.held()
    return replica.tracked() == {job.workload for job in scheduler.jobs.values() if spec.index_of(job) in held}


def split_exactly(a: Replica, b: Replica, scheduler: fake_scheduler.FakeScheduler) -> bool:
    everything = {job.workload for job in scheduler.jobs.values()}
    return (a.tracked() | b.tracked() == everything and not a.tracked() & b.tracked()
            and a.held() | b.held() == set(range(SHARDS)) and not a.held() & b.held()
            and follows_its_shards(a, scheduler) and follows_its_shards(b, scheduler))


async def test_two_replicas_split_the_workloads_and_one_takes_over_when_the_other_dies(
    tmp_path: Path, start: Callable[[str, fake_scheduler.FakeScheduler], asyncio.Future[Replica]],
) -> None:
    scheduler = a_cluster(tmp_path)
    everything = {job.workload for job in scheduler.jobs.values()}
    spec = shards.ShardSpec(SHARDS, "partition", "any")
    assert len({spec.index_of(job) for job in scheduler.jobs.values()}) > 1  # the workloads span several shards

    a = await start("replica-a", scheduler)
    await until(lambda: a.tracked() == everything, "replica A alone tracks every workload")
    b = await start("replica-b", scheduler)
    await until(lambda: split_exactly(a, b, scheduler) and len(a.held()) == len(b.held()) == SHARDS // 2,
                "the two replicas split the shards evenly and the workloads: no overlap, no gap")

    # A dies: its lease loop stops renewing (its engine keeps running, like a paused process).
    a_tokens = dict(a.ownership.leases.held())
    a_workloads = a.tracked()
    renewing = a.engine.timer("shard-leases")
    assert renewing is not None, "the shard lease timer runs"
    renewing.cancel()
    await until(lambda: b.held() == set(range(SHARDS)) and b.tracked() == everything,
                "replica B takes over A's shards after their leases expired and tracks every workload")
    terms = {token.lease: token.term for token in b.ownership.leases.held().values()}
    assert all(terms[t.lease] > t.term for t in a_tokens.values())  # every taken shard is a new term

    # Nothing A begins now is accepted: its own fence refuses (not renewed within the deadline) ...
    victim = sorted(a_workloads)[0]
    with pytest.raises(actions.FencedError):
        a.ownership.token(victim)
    item = advice.Advice.model_validate({
        "workload": victim, "attempt": 0, "generation": 7, "action": "requeue", "mode": "Action",
        "deadline": clock.SystemClock().now() + 300, "policy": "act"})
    before = len(scheduler.mutating_calls())
    assert await a.engine.executor.reconcile(item) is vocab.Disposition.PENDING
    assert len(scheduler.mutating_calls()) == before
    # ... and so does the shared store, even for a replica that still believes its old token.
    old = a_tokens[a.ownership.index_of(victim)]  # type: ignore[index]
    with pytest.raises(actions.FencedError, match="replica-b"):
        await a.store.begin_action(actions.ActionRecord(
            workload=victim, attempt=0, generation=7, step="requeue", operation=actions.Operation.REQUEUE,
            args={"job_id": victim.rsplit("/", 1)[1]}), at=clock.SystemClock().now(), fence=old)
    assert [r.step for r in await a.store.actions_for(victim, 0, 7)] == []


async def test_a_replica_that_stops_cleanly_hands_its_shards_over_without_waiting_for_expiry(
    tmp_path: Path, start: Callable[[str, fake_scheduler.FakeScheduler], asyncio.Future[Replica]],
) -> None:
    scheduler = a_cluster(tmp_path)
    everything = {job.workload for job in scheduler.jobs.values()}
    a = await start("replica-a", scheduler)
    b = await start("replica-b", scheduler)
    await until(lambda: split_exactly(a, b, scheduler) and a.held() and b.held(), "the replicas split the shards")
    a.stop.set()
    await asyncio.wait_for(a.task, timeout=60)
    records = await b.store.lease_records(shards.ShardSpec(SHARDS, "partition", "x").prefix)
    assert all(r.holder != "replica-a" for r in records.values())  # released: holder empty or B
    await until(lambda: b.held() == set(range(SHARDS)) and b.tracked() == everything,
                "replica B holds every shard after A released them")

