"""The VictoriaLogs log source against a real VictoriaLogs server (``tests.support.victorialogs``).

Lines reach the server the way they do in production (JSON lines with the stream fields, the
shipper of ``tests.support.log_shipper`` where a file is involved). Each test waits on
conditions (lines read, sweeps completed), never on fixed sleeps.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import pytest

from tests.support.log_shipper import Shipper
from tests.support.victorialogs import VictoriaLogsServer
from trainguard.model import clock
from trainguard.signals import resume
from trainguard.signals import victorialogs as vl
from trainguard.signals.positions import TailPosition
from trainguard.signals.tailer import MARKER

pytestmark = [pytest.mark.integration, pytest.mark.victorialogs]

OUT = "/shared/jobs/slurm-42.out"
WAIT_S = 120.0


def _ts(ns: int) -> str:
    return vl.format_time(ns)


async def push(url: str, rows: Sequence[tuple[int, str]], *, job: str = "42", path: str = OUT,
               host: str = "node1") -> None:
    """Rows (time ns, message) pushed as a shipper does, then made searchable at once."""
    body = b"".join(
        json.dumps({"ts": _ts(ns), "log": msg, "job_id": job, "filename": path, "host": host}).encode() + b"\n"
        for ns, msg in rows)
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{url}/insert/jsonline?_stream_fields=job_id,host,filename&_msg_field=log&_time_field=ts",
                          data=body, headers={"Content-Type": "application/stream+json"}) as resp:
            assert resp.status == 200, await resp.text()
        async with s.get(f"{url}/internal/force_flush") as resp:
            assert resp.status == 200


def new_book(url: str, *, start: TailPosition | None = None, sweep_s: float = 0.5) -> vl.VictoriaLogsBook:
    client = vl.Client(vl.Config(url=url, sweep_s=sweep_s, max_backoff_s=1.0))
    book = vl.VictoriaLogsBook("w42", "42", clock.SystemClock(), client)
    book.add(OUT, "stdout", resume.Start(start, "stored") if start is not None else None)
    return book


async def shut(book: vl.VictoriaLogsBook) -> None:
    book.close()
    await book.wait_closed()
    await book.client.close()


async def read_until(book: vl.VictoriaLogsBook, n: int, *, consume_upto: int | None = None) -> list[str]:
    """Read (and consume) until ``n`` lines came; only the first ``consume_upto`` are consumed."""
    got: list[str] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < n:
        assert time.monotonic() < deadline, f"only {len(got)} of {n} lines after {WAIT_S} s: {got[-5:]}"
        for f, lines in await book.read():
            for line in lines:
                got.append(line.text)
                if consume_upto is None or len(got) <= consume_upto:
                    book.consume(f, line)
        await asyncio.sleep(0.05)
    return got


async def settled(book: vl.VictoriaLogsBook, sweeps: int = 2) -> list[str]:
    """What ``book`` still hands out after ``sweeps`` more complete sweeps (should be nothing)."""
    target = book.rounds + sweeps
    deadline = time.monotonic() + WAIT_S
    extra: list[str] = []
    while book.rounds < target:
        assert time.monotonic() < deadline, "the sweeps did not complete"
        extra += [x.text for _f, lines in await book.read() for x in lines]
        await asyncio.sleep(0.05)
    return extra + [x.text for _f, lines in await book.read() for x in lines]


async def test_catch_up_then_live_every_line_once_in_order(victorialogs: VictoriaLogsServer) -> None:
    base = time.time_ns() - 60 * vl.NS
    await push(victorialogs.url, [(base + i * 1000, f"old {i}") for i in range(5000)])  # more than a page
    book = new_book(victorialogs.url)
    try:
        got = await read_until(book, 5000)
        assert got == [f"old {i}" for i in range(5000)]
        now = time.time_ns()
        await push(victorialogs.url, [(now + i, f"live {i}") for i in range(3)])
        assert await read_until(book, 3) == ["live 0", "live 1", "live 2"]
        assert await settled(book) == []
    finally:
        await shut(book)


async def test_a_restart_resumes_after_the_last_consumed_line_even_at_equal_timestamps(
        victorialogs: VictoriaLogsServer) -> None:
    t = time.time_ns() - 10 * vl.NS
    # three rows share one timestamp: the position must tell them apart
    rows = [(t, "a"), (t + 1, "b"), (t + 1, "c"), (t + 1, "d"), (t + 2, "e")]
    await push(victorialogs.url, rows)
    book = new_book(victorialogs.url)
    try:
        first = await read_until(book, 5, consume_upto=3)
    finally:
        await shut(book)
    assert sorted(first[1:4]) == ["b", "c", "d"]
    position = book.files[0].consumed
    assert position is not None and position.offset == t + 1 and position.inode == 2 and position.lineno == 3
    again = new_book(victorialogs.url, start=position)
    try:
        rest = await read_until(again, 2)
        assert sorted(rest) == sorted([first[3], "e"])
        assert await settled(again) == []
        assert again.files[0].lineno == 5  # numbering continues
    finally:
        await shut(again)


async def test_the_attempt_start_keeps_rows_of_earlier_attempts_out(victorialogs: VictoriaLogsServer) -> None:
    started = int(time.time()) - 5
    await push(victorialogs.url, [(started * vl.NS - 1000, "attempt 0 Xid 79"),
                                  (started * vl.NS + 1000, "attempt 1 banner")])
    client = vl.Client(vl.Config(url=victorialogs.url, sweep_s=0.5))
    book = vl.VictoriaLogsBook("w42", "42", clock.SystemClock(), client)
    start = book.attempt_start(OUT, attempt=1, running=True, started_at=float(started), mine=[], earlier=[])
    assert start is not None and start.basis == "started_at"
    book.add(OUT, "stdout", start)
    try:
        assert await read_until(book, 1) == ["attempt 1 banner"]
        assert await settled(book) == []
    finally:
        await shut(book)


async def test_a_server_outage_loses_nothing_and_reads_nothing_twice(victorialogs: VictoriaLogsServer) -> None:
    book = new_book(victorialogs.url)
    try:
        await push(victorialogs.url, [(time.time_ns(), "before")])
        assert await read_until(book, 1) == ["before"]
        victorialogs.stop()
        deadline = time.monotonic() + WAIT_S
        while book.client.reachable is not False:  # the source noticed (and logged) the outage
            assert time.monotonic() < deadline
            assert [x for _f, lines in await book.read() for x in lines] == []
            await asyncio.sleep(0.05)
        victorialogs.start()
        await push(victorialogs.url, [(time.time_ns() + i, f"after {i}") for i in range(3)])
        assert await read_until(book, 3) == ["after 0", "after 1", "after 2"]
        assert book.client.reachable is True
        assert await settled(book) == []
    finally:
        await shut(book)


async def test_hostile_lines_through_the_shipper(victorialogs: VictoriaLogsServer, tmp_path: Path) -> None:
    out = tmp_path / "slurm-42.out"
    out.write_bytes(b"start\n" + b"\xff\xfe\x00binary\x9c junk\n" + b"x" * (10 * 1024 * 1024) + b"\n"
                    + b"RuntimeError: CUDA error: an illegal memory access was encountered\n")
    async with Shipper(victorialogs.url, lambda: [(str(out), {"job_id": "42"})]):
        client = vl.Client(vl.Config(url=victorialogs.url, sweep_s=0.5))
        book = vl.VictoriaLogsBook("w42", "42", clock.SystemClock(), client)
        book.add(str(out), "stdout")
        try:
            got = await read_until(book, 4)
            assert got[0] == "start"
            assert "binary" in got[1] and "\ufffd" in got[1]
            assert got[2].startswith("x" * 1000) and len(got[2]) <= 64 * 1024 + 100
            assert got[3] == "RuntimeError: CUDA error: an illegal memory access was encountered"
            assert await settled(book) == []
        finally:
            await shut(book)


async def test_a_row_too_long_for_the_reader_becomes_a_marker(victorialogs: VictoriaLogsServer) -> None:
    client = vl.Client(vl.Config(url=victorialogs.url, sweep_s=0.5, max_row_bytes=4096))
    book = vl.VictoriaLogsBook("w42", "42", clock.SystemClock(), client)
    book.add(OUT, "stdout")
    try:
        now = time.time_ns()
        await push(victorialogs.url, [(now, "y" * 10000), (now + 1, "after the long one")])
        got = await read_until(book, 2)
        assert got[0].startswith(MARKER) and "dropped" in got[0]
        assert got[1] == "after the long one"
    finally:
        await shut(book)


async def test_an_unreachable_server_is_retried_without_crashing() -> None:
    client = vl.Client(vl.Config(url="http://127.0.0.1:9", sweep_s=0.2, max_backoff_s=0.5))
    book = vl.VictoriaLogsBook("w42", "42", clock.SystemClock(), client)
    book.add(OUT, "stdout")
    try:
        deadline = time.monotonic() + WAIT_S
        while client.reachable is not False:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert await book.read() == [(book.files[0], [])]
        assert all(not t.done() for t in book._tasks)  # still retrying
        assert "Connect" in client.last_error or "connect" in client.last_error
    finally:
        await shut(book)


async def test_a_backlog_older_than_the_window_is_caught_up_after_a_newer_tail_row(
        victorialogs: VictoriaLogsServer) -> None:
    """After a long outage or restart the tail may deliver fresh rows before the first sweep has
    read the backlog: the backlog must still be read in full (the window bounds only how late a
    row may arrive after rows already swept, not how far back a catch-up goes)."""
    now = time.time_ns()
    await push(victorialogs.url, [(now - 120 * vl.NS + i, f"backlog {i}") for i in range(3)])
    await push(victorialogs.url, [(now, "fresh")])
    client = vl.Client(vl.Config(url=victorialogs.url, sweep_s=0.5, window_s=5.0))
    book = vl.VictoriaLogsBook("w42", "42", clock.SystemClock(), client)
    # the tail's first row, before any sweep ran (as when the tail answers first)
    [fresh] = await client.query('job_id:="42" _msg:="fresh"')
    book._accept(fresh)
    book.add(OUT, "stdout")
    try:
        got = await read_until(book, 4)
        assert sorted(got) == ["backlog 0", "backlog 1", "backlog 2", "fresh"]
        assert await settled(book) == []
    finally:
        await shut(book)


async def test_rank_and_host_fields_of_per_node_streams(victorialogs: VictoriaLogsServer) -> None:
    """A per-node stream (not the job's shared output file) names its node; a rank field its rank."""
    now = time.time_ns()
    body = json.dumps({"ts": _ts(now), "log": "NCCL WARN Net : Connection closed", "job_id": "42",
                       "filename": "/var/log/pods/train-1/0.log", "host": "node2", "rank": "3"}) + "\n"
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{victorialogs.url}/insert/jsonline?_stream_fields=job_id,host,filename&_msg_field=log"
                          "&_time_field=ts", data=body, headers={"Content-Type": "application/stream+json"}):
            pass
        async with s.get(f"{victorialogs.url}/internal/force_flush"):
            pass
    await push(victorialogs.url, [(now + 1, "shared file line")])
    book = new_book(victorialogs.url)
    try:
        lines = []
        deadline = time.monotonic() + WAIT_S
        while len(lines) < 2:
            assert time.monotonic() < deadline
            lines += [x for _f, batch in await book.read() for x in batch]
            await asyncio.sleep(0.05)
        by_text = {x.text: x for x in lines}
        assert (by_text["NCCL WARN Net : Connection closed"].node, by_text["NCCL WARN Net : Connection closed"].rank) \
            == ("node2", 3)
        assert (by_text["shared file line"].node, by_text["shared file line"].rank) == (None, None)
    finally:
        await shut(book)


async def test_many_workloads_share_one_client_without_starving(victorialogs: VictoriaLogsServer) -> None:
    """Each workload holds a tail open; with more workloads than a default connection pool (100),
    every one must still be caught up by its sweeps."""
    client = vl.Client(vl.Config(url=victorialogs.url, sweep_s=1.0))
    now = time.time_ns()
    count = 110
    await push(victorialogs.url, [(now + i, f"line of {i}") for i in range(1)], job="0")
    for i in range(1, count):
        await push(victorialogs.url, [(now + i, f"line of {i}")], job=str(i))
    books = []
    for i in range(count):
        book = vl.VictoriaLogsBook(f"w{i}", str(i), clock.SystemClock(), client)
        book.add(OUT, "stdout")
        books.append(book)
    try:
        for i, book in enumerate(books):
            assert await read_until(book, 1) == [f"line of {i}"]
    finally:
        for book in books:
            book.close()
        for book in books:
            await book.wait_closed()
        await client.close()


async def test_rows_beyond_the_buffer_are_dropped_with_a_marker(victorialogs: VictoriaLogsServer) -> None:
    """A workload that is not read (its attempt has not started) holds at most ``max_buffer`` rows."""
    now = time.time_ns()
    await push(victorialogs.url, [(now + i, f"row {i}") for i in range(5)])
    client = vl.Client(vl.Config(url=victorialogs.url, sweep_s=0.5, max_buffer=3))
    book = vl.VictoriaLogsBook("w42", "42", clock.SystemClock(), client)
    book.add(OUT, "stdout")
    try:
        deadline = time.monotonic() + WAIT_S
        while book.rounds < 1:  # nothing read meanwhile: the rows wait in the buffer
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        got = [x.text for _f, lines in await book.read() for x in lines]
        assert got == [f"{MARKER} 2 log-store rows dropped: more than 3 waited to be read", "row 2", "row 3", "row 4"]
    finally:
        await shut(book)
