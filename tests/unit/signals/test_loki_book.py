"""The Loki book (one workload's output read from Loki) against the replaying server: lines are
charged to the job's output stream with rank and node from the labels, positions survive a
restart (nothing read twice), and lines before the attempt's start are not charged to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support import loki_replay
from tests.support.loki_replay import LokiReplay, recorded, until
from trainguard.model import clock as clock_mod
from trainguard.model import signals
from trainguard.signals import loki_book
from trainguard.signals.positions import TailPosition
from trainguard.signals.resume import Start

pytestmark = pytest.mark.unit

T = 1764590400000000000
OUT = "/shared/out/1001.out"


@pytest.fixture
async def replay() -> AsyncIterator[LokiReplay]:
    async for server in loki_replay.start():
        yield server


def book(replay: LokiReplay, start: Start | None = None) -> loki_book.LokiBook:
    make, _ = loki_book.books(loki_book.Config(url=replay.url, selector='cluster="a"'))
    b = make("slurm-1001", "1001", clock_mod.ManualClock(T / 1e9), None)
    assert isinstance(b, loki_book.LokiBook)
    b.add(OUT, "stdout", start)
    return b


async def read_all(b: loki_book.LokiBook, want: int) -> list[signals.LogLine]:
    """Tailing rounds (the first one starts the reader) until ``want`` lines were handed out."""
    got: list[signals.LogLine] = []
    while True:
        for s, lines in await b.read():
            for line in lines:
                b.consume(s, line)
                got.append(line)
        if len(got) >= want:
            return got
        await until(b.reader, lambda: b.reader.pending() > 0)


async def test_lines_positions_and_restart(replay: LokiReplay) -> None:
    first = book(replay, Start(TailPosition(OUT, 0, T, 0, ""), "started_at"))
    try:
        assert await first.read() == [(first.files[0], [])]  # the first round starts the reader
        await until(first.reader, first.reader.connected.is_set)
        assert replay.queries()[0]["query"] == '{job_id="1001", cluster="a"}'
        assert replay.queries()[0]["start"] == str(T)  # from the attempt's start
        await replay.send(recorded("crash.json")[0])
        lines = await read_all(first, 2)
    finally:
        first.close()
        await first.reader.client.close()
    # Per-node files of the ranks (not the job's StdOut): the host label names the node, the rank label the rank.
    assert [(x.text, x.rank, x.node, x.source) for x in lines] == [
        ("step 5 loss 1.20", 0, "node1", "stdout"), ("step 5 loss 1.21", 1, "node2", "stdout")]
    [s] = first.unsaved()
    stored = s.consumed
    assert stored is not None and (stored.offset, stored.inode, stored.lineno) == (T + 10_000, 2, 2)
    assert len(stored.fingerprint) == 2 * loki_book.BOOK_HASH_CHARS

    # A restarted engine: the stored position comes back; Loki repeats the lines at its time.
    replay.ranges.append({"status": "success", "data": {"resultType": "streams", "result": [
        *recorded("crash.json")[0]["streams"], *recorded("crash.json")[1]["streams"]]}})
    second = book(replay, Start(stored, "stored"))
    try:
        lines = await read_all(second, 1)
    finally:
        second.close()
        await second.reader.client.close()
    assert [(x.text, x.lineno, x.rank, x.node) for x in lines] == [
        ("RuntimeError: CUDA error: an illegal memory access was encountered", 3, 1, "node2")]
    assert replay.queries()[-1]["start"] == str(T + 10_000)


async def test_shared_output_file_and_attempt_floor(replay: LokiReplay) -> None:
    b = book(replay, Start(TailPosition(OUT, 0, T + 5, 0, ""), "started_at"))
    shared = {"job_id": "1001", "host": "batchhost", "filename": OUT}
    replay.ranges.append({"status": "success", "data": {"resultType": "streams", "result": [
        {"stream": shared, "values": [[str(T + 1), "old attempt line"], [str(T + 6), "1: NCCL WARN net failure"]]}]}})
    try:
        lines = await read_all(b, 1)
    finally:
        b.close()
        await b.reader.client.close()
    # Before the attempt's start: not charged to it. The job's shared StdOut is written by the batch
    # host for every rank: its host label is not the node of the line (the "1:" prefix decides).
    assert [(x.text, x.node, x.rank) for x in lines] == [("1: NCCL WARN net failure", None, None)]


async def test_lines_nobody_drains_are_bounded_and_the_loss_is_said(replay: LokiReplay) -> None:
    make, _ = loki_book.books(loki_book.Config(url=replay.url, max_buffer=2))
    b = make("slurm-1001", "1001", clock_mod.ManualClock(T / 1e9), None)
    assert isinstance(b, loki_book.LokiBook)
    b.add(OUT, "stdout", Start(TailPosition(OUT, 0, T, 0, ""), "started_at"))
    replay.ranges.append({"status": "success", "data": {"resultType": "streams", "result": [
        {"stream": {"job_id": "1001", "filename": OUT}, "values": [[str(T + i), f"line {i}"] for i in (1, 2, 3)]}]}})
    try:
        await b.observe_ends()  # no attempt runs yet: reading starts, nothing is handed out
        await until(b.reader, lambda: b.reader.overflow == 1)
        [(_, lines)] = await b.read()
    finally:
        b.close()
        await b.reader.client.close()
    assert [x.text for x in lines] == ["[trainguard] 1 log-store lines dropped (more than 2 waiting)", "line 2",
                                       "line 3"]
