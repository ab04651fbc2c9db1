"""The engine with Loki as its only log source: a crash line served by the replayed Loki (recorded
answers of Loki's documented API over a real socket, WebSocket tail included) becomes an anomaly,
a verdict and advice for the right workload, naming the node the line came from."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import fake_scheduler, loki_replay
from tests.support.loki_replay import LokiReplay, recorded, until
from tests.unit.engine import scenario
from trainguard import engine as engine_mod
from trainguard import settings as settings_mod
from trainguard.detect import catalog as catalog_mod
from trainguard.model import clock, vocab
from trainguard.policy import loader
from trainguard.signals import loki_book
from trainguard.store import database

pytestmark = pytest.mark.unit

T = 1764590400000000000
"""The recordings' time base (ns)."""


@pytest.fixture
async def replay() -> AsyncIterator[LokiReplay]:
    async for server in loki_replay.start():
        yield server


@contextlib.asynccontextmanager
async def loki_harness(
    replay: LokiReplay, tmp_path: Path, catalog: catalog_mod.Catalog, *, lag_s: float = 5.0,
) -> AsyncIterator[scenario.Harness]:
    """An engine (Action allowed) whose only log source is the replayed Loki, on a fresh store; its
    books, recoveries, client and store closed at the end."""
    store = await database.open_store(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    books, client = loki_book.books(loki_book.Config(url=replay.url))
    manual = clock.ManualClock(scenario.START)
    scheduler = fake_scheduler.FakeScheduler(nodes=scenario.NODES)
    engine = engine_mod.Engine(
        scheduler, store, loader.parse_text(scenario.POLICIES, "test"), catalog, clock_=manual,
        settings=settings_mod.EngineSettings(allow_action=True, log_store_lag_s=lag_s), log_books=books,
    )
    try:
        yield scenario.Harness(tmp_path, manual, scheduler, store, engine)
    finally:
        for rt in engine.runtimes.values():
            rt.book.close()
            if rt.task is not None and not rt.task.done():
                rt.task.cancel()
        await client.close()
        await store.close()


async def test_crash_line_from_loki_becomes_advice_for_the_right_workload_and_node(
    replay: LokiReplay, tmp_path: Path, catalog: catalog_mod.Catalog
) -> None:
    async with loki_harness(replay, tmp_path, catalog) as h:
        # The allocation lists node2 first: rank 1 would be placed on node1 by position, the label says node2.
        h.submit("1001", "trainguard", nodes=("node2", "node1"))  # the default policy: Monitor
        h.submit("1002", "trainguard")  # another job: Loki serves it nothing
        await h.step()
        book = h.runtime("1001").book
        assert isinstance(book, loki_book.LokiBook)
        await until(book.reader, book.reader.connected.is_set)
        first, second = recorded("crash.json")
        await until(book.reader, lambda: '{job_id="1001"}' in replay.tail_queries)
        await replay.send_to('{job_id="1001"}', first)
        await replay.send_to('{job_id="1001"}', second)
        await until(book.reader, lambda: book.reader.pending() == 3)
        await h.step()
        await h.settle()

        [anomaly] = await h.records("1001", vocab.AuditKind.ANOMALY)
        assert anomaly.payload["category"] == "cuda_illegal_memory"
        assert anomaly.payload["suspect_nodes"] == ["node2"]
        assert any("illegal memory access" in e["text"] for e in anomaly.payload["evidence"])
        [advice] = await h.advice("1001")
        assert advice["mode"] == "Monitor"
        assert await h.records("1002", vocab.AuditKind.ANOMALY) == []
        assert h.scheduler.mutating_calls() == []


async def test_a_failed_job_whose_crash_rows_reach_loki_after_its_end_is_judged_on_them(
    replay: LokiReplay, tmp_path: Path, catalog: catalog_mod.Catalog
) -> None:
    """A store delivers rows a moment after they are written, and the job may end first (srun kills
    the step right after a rank's error): the engine reads on (``log_store_lag_s``) before judging
    the failure on its exit state alone, so the anomaly names the crash line and its node."""
    async with loki_harness(replay, tmp_path, catalog) as h:
        h.submit("1001", "trainguard", nodes=("node2", "node1"))
        await h.step()
        book = h.runtime("1001").book
        assert isinstance(book, loki_book.LokiBook)
        await until(book.reader, book.reader.connected.is_set)
        await until(book.reader, lambda: '{job_id="1001"}' in replay.tail_queries)
        h.fail("1001", exit_code=143)
        judged = asyncio.create_task(h.step())  # sees the end; the crash rows are not in Loki yet
        await asyncio.sleep(0.6)
        assert not judged.done()
        assert await h.records("1001", vocab.AuditKind.ANOMALY) == []
        first, second = recorded("crash.json")
        await replay.send_to('{job_id="1001"}', first)
        await replay.send_to('{job_id="1001"}', second)
        await asyncio.wait_for(judged, timeout=10)
        await h.settle()

        [anomaly] = await h.records("1001", vocab.AuditKind.ANOMALY)
        assert anomaly.payload["category"] == "cuda_illegal_memory"
        assert anomaly.payload["suspect_nodes"] == ["node2"]


def for_job(frames: list[dict[str, Any]], job_id: str) -> list[dict[str, Any]]:
    """The recorded frames of job 1001 as job ``job_id``'s rows."""
    text = json.dumps(frames).replace('"1001"', f'"{job_id}"').replace("/1001-", f"/{job_id}-")
    return list(json.loads(text))


async def test_jobs_failing_together_wait_for_their_rows_side_by_side_not_in_turn(
    replay: LokiReplay, tmp_path: Path, catalog: catalog_mod.Catalog
) -> None:
    """Many jobs on a log store end in one round (a switch, a rack): each may wait for its last rows,
    and they wait together. The second job's rows arrive while the first still waits (its never
    do): the second is judged on them at once, not after the first's whole wait."""
    async with loki_harness(replay, tmp_path, catalog, lag_s=60.0) as h:
        h.submit("1001", "trainguard", nodes=("node2", "node1"))
        h.submit("1002", "trainguard", nodes=("node2", "node1"))
        await h.step()
        books = [h.runtime(job).book for job in ("1001", "1002")]
        for job, book in zip(("1001", "1002"), books, strict=True):
            assert isinstance(book, loki_book.LokiBook)
            await until(book.reader, book.reader.connected.is_set)
            await until(book.reader, lambda job=job: f'{{job_id="{job}"}}' in replay.tail_queries)
        h.fail("1001", exit_code=143)
        h.fail("1002", exit_code=143)
        judged = asyncio.create_task(h.step())  # sees both ends; no crash row is in Loki yet
        for frame in for_job(recorded("crash.json"), "1002"):
            await replay.send_to('{job_id="1002"}', frame)
        for _ in range(200):  # up to 20 s; the first job's wait is 60 s
            if await h.records("1002", vocab.AuditKind.ANOMALY):
                break
            await asyncio.sleep(0.1)
        assert not judged.done()  # the first job still waits for its rows
        [anomaly] = await h.records("1002", vocab.AuditKind.ANOMALY)
        assert anomaly.payload["category"] == "cuda_illegal_memory"
        for frame in recorded("crash.json"):
            await replay.send_to('{job_id="1001"}', frame)
        await asyncio.wait_for(judged, timeout=20)
        await h.settle()
        [anomaly] = await h.records("1001", vocab.AuditKind.ANOMALY)
        assert anomaly.payload["suspect_nodes"] == ["node2"]


async def test_a_restarted_engine_resumes_loki_at_the_stored_position(
    replay: LokiReplay, tmp_path: Path, catalog: catalog_mod.Catalog
) -> None:
    store = await database.open_store(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    manual = clock.ManualClock(scenario.START)
    scheduler = fake_scheduler.FakeScheduler(nodes=scenario.NODES)
    policies = loader.parse_text(scenario.POLICIES, "test")
    engines: list[engine_mod.Engine] = []
    clients = []

    def new_engine() -> engine_mod.Engine:
        books, client = loki_book.books(loki_book.Config(url=replay.url))
        clients.append(client)
        engines.append(engine_mod.Engine(scheduler, store, policies, catalog, clock_=manual, log_books=books,
                                         settings=settings_mod.EngineSettings(allow_action=True)))
        return engines[-1]

    h = scenario.Harness(tmp_path, manual, scheduler, store, new_engine())
    h.submit("1001", "trainguard", nodes=("node2", "node1"))
    first, second = recorded("crash.json")
    try:
        await h.step()
        book = h.runtime("1001").book
        assert isinstance(book, loki_book.LokiBook)
        await until(book.reader, book.reader.connected.is_set)
        await replay.send_to('{job_id="1001"}', first)
        await until(book.reader, lambda: book.reader.pending() == 2)
        await h.step()  # the two progress lines are handed to detection
        await h.step(settings_mod.EngineSettings().position_save_interval_s)  # ... and their position is stored
        [stored] = await store.tail_positions(scenario.workload_of("1001"))
        assert (stored.offset, stored.inode, stored.lineno) == (T + 10_000, 2, 2)
        book.close()  # the process stops

        # A new process on the same store: Loki answers the catch-up with the old lines and the new one.
        replay.ranges.append({"status": "success", "data": {"resultType": "streams", "result": [
            *first["streams"], *second["streams"]]}})
        h.engine = new_engine()
        await h.step()
        book = h.runtime("1001").book
        assert isinstance(book, loki_book.LokiBook)
        await until(book.reader, lambda: book.reader.pending() == 3)  # the book skips the two read before
        await h.step()
        await h.settle()
        assert replay.queries()[-1]["start"] == str(T + 10_000)  # from the stored time, inclusive
        [anomaly] = await h.records("1001", vocab.AuditKind.ANOMALY)
        assert anomaly.payload["suspect_nodes"] == ["node2"]
        assert {e["line"] for e in anomaly.payload["evidence"]} == {3}  # counted on, nothing read twice
    finally:
        for engine in engines:
            for rt in engine.runtimes.values():
                rt.book.close()
                if rt.task is not None and not rt.task.done():
                    rt.task.cancel()
        for client in clients:
            await client.close()
        await store.close()
