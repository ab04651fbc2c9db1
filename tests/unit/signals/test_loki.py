"""The Loki reader against recorded answers of Loki's documented HTTP API, replayed by a local
aiohttp server over a real socket (no Loki server may run here): catch-up paging with equal
timestamps at a page border, the live tail with ``dropped_entries``, a reconnect without loss or
duplicates, resuming from a stored position, auth headers, and errors that never crash the reader."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import AsyncIterator

import pytest

from tests.support import loki_replay
from tests.support.loki_replay import CLOSE, HANG, LokiReplay, Reply, recorded, until
from trainguard.model import clock as clock_mod
from trainguard.signals import loki, loki_api

pytestmark = pytest.mark.unit

T = 1764590400000000000
QUERY = '{job_id=~".+"}'


@pytest.fixture
async def replay() -> AsyncIterator[LokiReplay]:
    async for server in loki_replay.start():
        yield server


def reader(replay: LokiReplay, *, auth: loki.LokiAuth | None = None, now_ns: int = T + 100_000,
           page_limit: int = 3, timeout_s: float = 10.0) -> loki.LokiReader:
    client = loki.LokiClient(replay.url, auth=auth, timeout_s=timeout_s)
    return loki.LokiReader(client, QUERY, clock_mod.ManualClock(1000.0), page_limit=page_limit,
                           now_ns=lambda: now_ns, backoff_s=(0.01, 0.05))


def texts(r: loki.LokiReader, workload: str = "42") -> list[str]:
    return [x.line.text for x in r.drain(workload)]


@contextlib.asynccontextmanager
async def running(r: loki.LokiReader) -> AsyncIterator[asyncio.Event]:
    stop = asyncio.Event()
    task = asyncio.create_task(r.run(stop))
    try:
        yield stop
    finally:
        stop.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await r.client.close()


class Collect:
    """Lines drained so far for one workload (``drain`` empties the reader's buffer)."""

    def __init__(self, r: loki.LokiReader, workload: str = "42") -> None:
        self.r, self.workload, self.lines = r, workload, list[loki.LokiLine]()

    def __call__(self) -> list[str]:
        self.lines += self.r.drain(self.workload)
        return [x.line.text for x in self.lines]


async def test_paging_with_equal_timestamps_at_the_page_border(replay: LokiReplay) -> None:
    replay.ranges += [recorded(f"query_range_page{n}.json") for n in (1, 2, 3)]
    r = reader(replay, page_limit=3)
    taken = await r.catch_up(T, T + 50)
    await r.client.close()
    lines = r.drain("42")
    assert [(x.line.text, x.line.rank, x.line.node) for x in lines] == [
        ("step 1 loss 2.31", 0, "node1"),
        ("step 2 loss 2.20", 0, "node1"),
        ("step 2 loss 2.21", 1, "node2"),
        ("step 3 loss 2.11", 0, "node1"),
        ("step 3 loss 2.12", 1, "node2"),
    ]
    assert taken == 5 and all(x.attempt == 0 and x.workload == "42" for x in lines)
    first, second, third = replay.queries()
    assert first == {"query": QUERY, "start": str(T), "end": str(T + 50), "limit": "3", "direction": "forward"}
    # A full page: the next one starts AT its last nanosecond (two lines share it), not after it.
    assert second == {**first, "start": str(T + 5)}
    assert third == {**first, "start": str(T + 9)}
    # Line numbers count per stream; the stream is named by its labels.
    assert [x.line.lineno for x in lines] == [1, 2, 1, 3, 2]
    assert lines[2].line.source == ('loki:{attempt="0",filename="/shared/out/42.out",host="node2",job_id="42",'
                                    'rank="1"}')


async def test_tail_and_dropped_entries_are_read_once(replay: LokiReplay) -> None:
    replay.ranges += [recorded("query_range_empty.json"), recorded("query_range_dropped.json")]
    r = reader(replay)
    got = Collect(r)
    async with running(r):
        await until(r, r.connected.is_set)
        for message in recorded("tail_live.json"):
            await replay.send(message)
        await until(r, lambda: len(got()) >= 4)
        await until(r, lambda: r.catch_ups == 2)
    assert got() == ["step 10 loss 1.90", "step 10 loss 1.91", "step 12 loss 1.80", "step 11 loss 1.85"]
    tail = replay.tails()[0]
    assert tail["query"] == QUERY and tail["delay_for"] == "0" and tail["limit"] == "3"
    # The dropped entry's time is read with query_range (from it, inclusive).
    assert replay.queries()[1]["start"] == str(T + 2000)


async def test_reconnect_catches_up_without_loss_or_duplicates(replay: LokiReplay) -> None:
    r = reader(replay)
    got = Collect(r)
    r0 = {"job_id": "42", "attempt": "0", "rank": "0", "host": "node1", "filename": "/shared/out/42.out"}

    def msg(*values: tuple[int, str]) -> dict[str, object]:
        return {"streams": [{"stream": r0, "values": [[str(ns), text] for ns, text in values]}]}

    # The first catch-up finds one line of rank 1, which then stays quiet.
    r1 = {**r0, "rank": "1", "host": "node2"}
    replay.ranges.append({"status": "success", "data": {"resultType": "streams", "result": [
        {"stream": r1, "values": [[str(T + 1), "quiet"]]}]}})
    async with running(r):
        await until(r, r.connected.is_set)
        await replay.send(msg((T + 10, "a"), (T + 20, "b")))
        await until(r, lambda: got() == ["quiet", "a", "b"])
        # While the socket is down, "c" reaches Loki; the catch-up answer repeats "b" (from its ns on).
        replay.ranges.append({"status": "success", "data": {"resultType": "streams", "result": [
            {"stream": r0, "values": [[str(T + 20), "b"], [str(T + 30), "c"]]}]}})
        await replay.send(CLOSE)
        await until(r, lambda: replay.tail_connections == 2 and r.connected.is_set())
        # The new tail replays from the last timestamp read: "b" and "c" again, then "d" is new.
        await replay.send(msg((T + 20, "b"), (T + 30, "c"), (T + 40, "d")))
        await until(r, lambda: "d" in got())
    assert got() == ["quiet", "a", "b", "c", "d"]
    assert [x.line.lineno for x in got.lines] == [1, 1, 2, 3, 4]
    # The catch-up starts at the newest line read, not at the quiet stream's older position.
    assert replay.queries()[-1]["start"] == str(T + 20)
    assert replay.tails()[-1]["start"] == str(T + 30)


async def test_restart_resumes_from_the_stored_position(replay: LokiReplay) -> None:
    replay.ranges += [recorded("query_range_page1.json")]
    first = reader(replay, page_limit=10)
    await first.catch_up(T, T + 50)
    await first.client.close()
    assert len(first.drain("42")) == 3
    stored = first.positions()
    assert {(p.path.split("rank=")[1], p.offset, p.lineno) for p in stored} == {
        ('"0"}', T + 5, 2), ('"1"}', T + 5, 1)}
    assert first.positions() == []  # nothing moved since
    assert all(p.source == "loki" and p.workload == "42" and p.attempt == 0 for p in stored)

    # A new process: the stored positions come back; page 2 repeats the lines at T+5.
    replay.ranges += [recorded("query_range_page2.json")]
    second = reader(replay, page_limit=10, now_ns=T + 50)
    second.restore(stored)
    await second.catch_up()
    await second.client.close()
    lines = second.drain("42")
    assert [(x.line.text, x.line.lineno) for x in lines] == [("step 3 loss 2.11", 3)]
    assert replay.queries()[-1]["start"] == str(T + 5)


async def test_tenant_and_bearer_token_on_query_and_tail(replay: LokiReplay) -> None:
    r = reader(replay, auth=loki.LokiAuth(tenant="team-a", bearer_token="s3cret"))
    async with running(r):
        await until(r, r.connected.is_set)
    for request in replay.requests:
        assert request.headers["X-Scope-OrgID"] == "team-a"
        assert request.headers["Authorization"] == "Bearer s3cret"
    assert {q.path for q in replay.requests} == {"/loki/api/v1/query_range", "/loki/api/v1/tail"}


async def test_basic_auth(replay: LokiReplay) -> None:
    r = reader(replay, auth=loki.LokiAuth(username="tg", password="pw"))
    await r.catch_up(T, T + 1)
    await r.client.close()
    assert replay.requests[0].headers["Authorization"] == "Basic " + base64.b64encode(b"tg:pw").decode()
    assert "X-Scope-OrgID" not in replay.requests[0].headers


async def test_errors_are_logged_retried_and_lose_nothing(replay: LokiReplay, caplog: pytest.LogCaptureFixture) -> None:
    replay.ranges += [
        Reply(500, "rpc error: code = Unavailable"),
        Reply(400, "parse error at line 1, col 2: syntax error"),
        "{not json",
        {"status": "success", "data": {"resultType": "matrix", "result": []}},
        HANG,
        recorded("query_range_page1.json"),
    ]
    r = reader(replay, page_limit=10, timeout_s=0.5)
    got = Collect(r)
    with caplog.at_level(logging.WARNING, logger="trainguard.signals.loki"):
        async with running(r):
            await until(r, r.connected.is_set)
            await replay.send("]]garbage")  # a malformed tail message: reconnect and catch up
            await until(r, lambda: replay.tail_connections == 2 and r.connected.is_set())
            await replay.send({"streams": [{"stream": {"job_id": "42"}, "values": [
                [str(T + 60), "x" * 100_000]]}]})
            await until(r, lambda: len(got()) == 4)
    assert got()[:3] == ["step 1 loss 2.31", "step 2 loss 2.20", "step 2 loss 2.21"]
    huge = got()[3]
    assert huge.startswith("x" * 1000) and huge.endswith(f"{loki.MARKER} {100_000 - loki.DEFAULT_MAX_LINE} bytes "
                                                         "of this line dropped")
    assert r.errors == 6
    log = caplog.text
    for expected in ("query_range answered 500: rpc error", "query_range answered 400: parse error",
                     "query_range answer is malformed", "resultType is 'matrix'", "query_range failed: TimeoutError",
                     "tail message is malformed", "tail connected again"):
        assert expected in log


async def test_refused_tail_and_unreachable_server_never_raise(replay: LokiReplay,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    replay.refuse_tail = 401
    r = reader(replay)
    with caplog.at_level(logging.WARNING, logger="trainguard.signals.loki"):
        async with running(r):
            await until(r, lambda: r.errors >= 2)
    assert "tail refused: 401" in caplog.text
    assert caplog.text.count("tail refused: 401") == 1  # one line per change of state, not per retry

    dead = loki.LokiReader(loki.LokiClient("http://127.0.0.1:9"), QUERY, clock_mod.ManualClock(0.0),
                           backoff_s=(0.01, 0.02))
    async with running(dead):
        await until(dead, lambda: dead.errors >= 2)
    assert not dead.connected.is_set()


async def test_stream_without_the_job_label_is_skipped_with_a_warning(
        replay: LokiReplay, caplog: pytest.LogCaptureFixture) -> None:
    replay.ranges.append({"status": "success", "data": {"resultType": "streams", "result": [
        {"stream": {"app": "web"}, "values": [[str(T), "hello"]]},
        {"stream": {"job_id": "7", "host": "n3", "rank": "x"}, "values": [[str(T), "hi"]]}]}})
    r = reader(replay)
    with caplog.at_level(logging.WARNING, logger="trainguard.signals.loki"):
        await r.catch_up(T, T + 1)
    await r.client.close()
    assert r.workloads() == ["7"]
    (line,) = r.drain("7")
    assert (line.line.text, line.line.node, line.line.rank, line.attempt) == ("hi", "n3", None, None)
    assert "has no 'job_id' label" in caplog.text


async def test_a_too_large_answer_is_asked_again_in_smaller_pages(replay: LokiReplay,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loki_api, "MAX_BODY", 400)  # the client reads its answers
    replay.ranges += [recorded("query_range_page1.json"),  # longer than 400 bytes
                      {"status": "success", "data": {"resultType": "streams", "result": [
                          {"stream": {"job_id": "42"}, "values": [[str(T), "a"]]}]}}]
    r = reader(replay, page_limit=3)
    await r.catch_up(T, T + 50)
    await r.client.close()
    assert texts(r) == ["a"]
    assert [(q["limit"], q["start"]) for q in replay.queries()] == [("3", str(T)), ("1", str(T)), ("1", str(T))]


async def test_many_open_tails_do_not_starve_the_catch_up(replay: LokiReplay) -> None:
    """Every tracked job holds one tail WebSocket on the shared client: more than aiohttp's default
    pool of 100 must not leave a catch-up query waiting for a free connection."""
    client = loki.LokiClient(replay.url, timeout_s=10.0)
    try:
        async with contextlib.AsyncExitStack() as stack:
            for n in range(101):
                await stack.enter_async_context(client.tail(f'{{job_id="{n}"}}', T))
            assert replay.tail_connections == 101
            async with asyncio.timeout(5):
                assert await client.query_range(QUERY, T, T + 1, 10) == []
    finally:
        await client.close()
