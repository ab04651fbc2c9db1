"""The pod-log book's line handling (k8s/podlogs.py) on byte streams: order, node/rank, reconnects, restarts,
attempt starts, hostile output. The streams are asyncio StreamReaders fed with what the kubelet sends
(``timestamps=true``); following real pods is in tests/integration/kube/test_podsignals_cluster.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import kubernetes_asyncio.client
import pytest
import yaml

from trainguard.k8s import kube_signals, podlog_parts, podlogs, pods
from trainguard.model import clock
from trainguard.signals import resume, sources
from trainguard.signals.positions import TailPosition
from trainguard.signals.storebook import Stream
from trainguard.signals.tailer import MARKER

PATH = "k8s://team/JobSet/train"
T0 = 1796155200 * pods.NS  # 2026-12-01T20:00:00Z


def _ts(ns: int) -> str:
    return pods.format_time(ns).replace("Z", f".{ns % pods.NS:09d}Z")


def _stream(*lines: bytes, end: bool = True) -> SimpleNamespace:
    reader = asyncio.StreamReader()
    for line in lines:
        reader.feed_data(line)
    if end:
        reader.feed_eof()
    return SimpleNamespace(content=reader)


def _line(ns: int, text: str) -> bytes:
    return f"{_ts(ns)} {text}\n".encode()


@pytest.fixture
async def api() -> AsyncIterator[kubernetes_asyncio.client.ApiClient]:
    client = kubernetes_asyncio.client.ApiClient(kubernetes_asyncio.client.Configuration())
    yield client
    await client.close()


def _book(api: kubernetes_asyncio.client.ApiClient, config: podlog_parts.Config | None = None,
          start: resume.Start | None = None) -> podlogs.PodLogBook:
    make, _source = podlogs.books(api, config)
    book = make("kube/team/train", "team/train", clock.ManualClock(100.0), None)
    assert isinstance(book, podlogs.PodLogBook)
    book.files.append(Stream(PATH, "stdout"))  # as ``add`` does, without starting the pod watch
    if start is not None:
        book._place(book.files[0], start.position)
    else:
        book.files[0].consumed = TailPosition(PATH, 0, 0, 0, "")
    book.target = pods.parse_path(PATH)
    return book


def _pod(book: podlogs.PodLogBook, name: str, node: str, rank: int | None) -> tuple[str, podlog_parts.Follow]:
    uid = f"uid-{name}"
    book._views[uid] = pods.PodView(uid=uid, name=name, node=node, rank=rank, containers=["trainer"])
    follow = podlog_parts.Follow(name, "trainer", uid=uid)
    book._follows[(name, "trainer")] = follow
    return uid, follow


async def _texts(book: podlogs.PodLogBook) -> list[tuple[str, str | None, int | None]]:
    ((_, lines),) = await book.read()
    for line in lines:
        book.consume(book.files[0], line)
    return [(line.text, line.node, line.rank) for line in lines]


async def test_lines_of_every_pod_in_time_order_with_node_and_rank(api: kubernetes_asyncio.client.ApiClient) -> None:
    book = _book(api)
    a, fa = _pod(book, "train-w-0-0", "kwok-node-1", 0)
    b, fb = _pod(book, "train-w-0-1", "kwok-node-2", 1)
    await book._read_stream(a, fa, _stream(_line(T0 + 1, "a1"), _line(T0 + 30, "a2")))
    await book._read_stream(b, fb, _stream(_line(T0 + 20, "b1")))
    assert await _texts(book) == [("a1", "kwok-node-1", 0), ("b1", "kwok-node-2", 1), ("a2", "kwok-node-1", 0)]
    assert book.files[0].consumed is not None and book.files[0].consumed.offset == T0 + 30


async def test_a_pod_our_suspend_took_away_is_heard_until_then_and_not_after(
        api: kubernetes_asyncio.client.ApiClient) -> None:
    """On a real kubelet a pod our restart deletes dies seconds after our resume: its last lines and its
    ending (killed) are our restart's doing and must not become a failure of the attempt the resume
    started; lines it printed before our suspend, and every line of a pod we did not take away, stay."""
    book = _book(api)
    old, fold = _pod(book, "train-w-0-0-a", "real-node-1", 0)
    new, fnew = _pod(book, "train-w-0-0-b", "kwok-node-1", 0)
    book.source.retired = lambda target: {old: T0 + 10} if target == book.target else {}
    await book._read_stream(old, fold, _stream(_line(T0 + 5, "NVRM: Xid 79"), _line(T0 + 10, "at the suspend"),
                                               _line(T0 + 12, "Traceback (most recent call last):")))
    await book._read_stream(new, fnew, _stream(_line(T0 + 15, "iteration 1")))
    book._note_endings({"metadata": {"name": "train-w-0-0-a", "uid": old}, "spec": {"nodeName": "real-node-1"},
                        "status": {"containerStatuses": [{"name": "trainer", "state": {"terminated": {
                            "exitCode": 1, "reason": "Error", "finishedAt": pods.format_time(T0 + 3 * pods.NS)}}}]}},
                       book._views[old])
    assert [t for t, _, _ in await _texts(book)] == ["NVRM: Xid 79", "at the suspend", "iteration 1"]


async def test_what_an_ended_pod_delivers_from_before_a_new_attempt_was_seen_is_not_the_new_attempts(
        api: kubernetes_asyncio.client.ApiClient) -> None:
    """A PyTorchJob's failed Worker is re-created under its name while the job stays Running: the
    listing shows the new attempt, and only then does the old pod's ending ("killed") arrive. It is
    the old attempt's (judged already), not a failure of the re-run. Running pods keep every line: a
    survivor's, and the re-created pod's even when our pod watch saw it before the listing did."""
    book = _book(api)
    master, fmaster = _pod(book, "ptj-master-0", "kwok-node-1", 0)
    old, _ = _pod(book, "ptj-worker-1", "kwok-node-2", 2)
    new = "uid-ptj-worker-1-b"  # re-created under its name, on another node
    book._views[new] = pods.PodView(uid=new, name="ptj-worker-1", node="kwok-node-3", rank=2, containers=["trainer"])
    fnew = podlog_parts.Follow("ptj-worker-1", "trainer", uid=new)
    for uid in (master, new):
        book._views[uid].running = {"trainer": True}
    book._uids.update((master, old, new))  # all seen by the pod watch (``_note``)
    await book._read_stream(master, fmaster, _stream(_line(T0 + 1 * pods.NS, "iteration 1")))
    assert [t for t, _, _ in await _texts(book)] == ["iteration 1"]
    book.attempt_replaced((T0 + 10 * pods.NS) / pods.NS)  # the listing shows attempt 1
    book._views[old].finished = True
    book._note_endings({"metadata": {"name": "ptj-worker-1", "uid": old}, "spec": {"nodeName": "kwok-node-2"},
                        "status": {"containerStatuses": [{"name": "trainer", "state": {"terminated": {
                            "exitCode": 137, "reason": "Error",
                            "finishedAt": pods.format_time(T0 + 9 * pods.NS)}}}]}}, book._views[old])
    await book._read_stream(new, fnew, _stream(_line(T0 + 9 * pods.NS + 5, "worker starting")))
    await book._read_stream(master, fmaster, _stream(_line(T0 + 9 * pods.NS, "a survivor's late line"),
                                                     _line(T0 + 12 * pods.NS, "iteration 2")))
    assert [t for t, _, _ in await _texts(book)] == ["a survivor's late line", "worker starting", "iteration 2"]


async def test_a_reconnect_reads_the_same_second_again_without_duplicates(
        api: kubernetes_asyncio.client.ApiClient) -> None:
    book = _book(api)
    uid, follow = _pod(book, "p", "kwok-node-1", 0)
    await book._read_stream(uid, follow, _stream(_line(T0 + 5, "one"), _line(T0 + 7, "two")))
    assert [t for t, _, _ in await _texts(book)] == ["one", "two"]
    # reopened with sinceTime = the second of the newest line: the kubelet sends that second again
    await book._read_stream(uid, follow, _stream(_line(T0 + 5, "one"), _line(T0 + 7, "two"),
                                                 _line(T0 + 7, "two again, same time"), _line(T0 + 9, "three")))
    assert [t for t, _, _ in await _texts(book)] == ["two again, same time", "three"]


async def test_a_restarted_book_resumes_after_the_last_line_handed_out(
        api: kubernetes_asyncio.client.ApiClient) -> None:
    book = _book(api)
    uid, follow = _pod(book, "p", "kwok-node-1", 0)
    await book._read_stream(uid, follow, _stream(_line(T0, "before"), _line(T0 + 3, "x"), _line(T0 + 3, "y")))
    await _texts(book)
    saved = book.files[0].consumed
    assert saved is not None and (saved.offset, saved.inode, saved.lineno) == (T0 + 3, 2, 3)
    # a new engine: the stored position comes back as this attempt's start
    again = _book(api)
    start = again.attempt_start(PATH, attempt=0, running=True, started_at=None, mine=[saved], earlier=[])
    assert start is not None and start.basis == "stored"
    restarted = _book(api, start=start)
    uid, follow = _pod(restarted, "p", "kwok-node-1", 0)
    await restarted._read_stream(uid, follow, _stream(_line(T0, "before"), _line(T0 + 3, "x"), _line(T0 + 3, "y"),
                                                      _line(T0 + 4, "z")))
    lines = await restarted.read()
    assert [(ln.text, ln.lineno) for ln in lines[0][1]] == [("z", 4)]


async def test_an_attempts_lines_start_at_its_start(api: kubernetes_asyncio.client.ApiClient) -> None:
    book = _book(api)
    pending = book.attempt_start(PATH, attempt=1, running=False, started_at=None, mine=[], earlier=[])
    assert pending is not None and pending.basis == "pending"
    uid, follow = _pod(book, "p", "kwok-node-1", 0)
    await book._read_stream(uid, follow, _stream(_line(T0 + 1, "old attempt"), _line(T0 + 3 * pods.NS, "new")))
    book.place_at_start(T0 / pods.NS + 2)
    assert [t for t, _, _ in await _texts(book)] == ["new"]


async def test_binary_junk_and_a_10_mb_line_are_survived_with_bounded_lines(
        api: kubernetes_asyncio.client.ApiClient) -> None:
    book = _book(api, podlog_parts.Config(max_line=1024, chunk=4096))
    uid, follow = _pod(book, "p", "kwok-node-1", 0)
    huge = f"{_ts(T0 + 1)} ".encode() + b"A" * (10 * 1024 * 1024) + b"\n"
    junk = f"{_ts(T0 + 2)} ".encode() + bytes(range(256)).replace(b"\n", b"") + b"\n"
    reader = asyncio.StreamReader()
    task = asyncio.ensure_future(book._read_stream(uid, follow, SimpleNamespace(content=reader)))
    for i in range(0, len(huge), 65536):  # fed in pieces, as a socket delivers it
        reader.feed_data(huge[i:i + 65536])
        await asyncio.sleep(0)
    reader.feed_data(junk + _line(T0 + 3, "after"))
    reader.feed_eof()
    await task
    texts = [t for t, _, _ in await _texts(book)]
    assert len(texts) == 3
    assert texts[0].startswith("A" * 1024) and texts[0].endswith(f"{MARKER} {10 * 1024 * 1024 - 1024} bytes of this "
                                                                 "line dropped")
    assert len(texts[0]) < 1200
    assert "\ufffd" in texts[1]
    assert texts[2] == "after"


async def test_too_many_waiting_lines_drop_the_oldest_with_a_marker(api: kubernetes_asyncio.client.ApiClient) -> None:
    book = _book(api, podlog_parts.Config(max_buffer=3))
    uid, follow = _pod(book, "p", "kwok-node-1", 0)
    await book._read_stream(uid, follow, _stream(*(_line(T0 + i, f"l{i}") for i in range(5))))
    assert [t for t, _, _ in await _texts(book)] == [f"{MARKER} 2 pod-log lines dropped: more than 3 waited to be "
                                                     "read", "l2", "l3", "l4"]


async def test_a_failed_pod_is_one_termination_line_once(api: kubernetes_asyncio.client.ApiClient) -> None:
    book = _book(api)
    body = {"metadata": {"name": "train-w-0-1", "uid": "u1",
                         "labels": {pods.JOBSET_GLOBAL_INDEX: "1"}},
            "spec": {"nodeName": "kwok-node-2", "containers": [{"name": "trainer"}]},
            "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {"terminated": {
                "exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-12-01T20:00:05Z"}}}]}}
    book._note(body)
    book._note(body)  # the same pod seen again (a watch event, a re-list)
    assert await _texts(book) == [("trainguard: pod train-w-0-1 container trainer on kwok-node-2 ended: "
                                   "reason=OOMKilled exitCode=137 signal=SIGKILL", "kwok-node-2", 1)]


async def test_a_failure_the_scheduler_saw_first_is_read_before_the_books_own_watch_sees_it(
        api: kubernetes_asyncio.client.ApiClient) -> None:
    """The scheduler's watch saw the pod fail and its re-creation (the attempt moved on); this book's
    watch has not delivered the failure yet. The read at the attempt's switch takes the ending from
    the scheduler's copy, so it goes to the attempt that failed; the book's own event later adds nothing."""
    book = _book(api)
    body = {"metadata": {"name": "train-w-0-1", "uid": "u1", "labels": {pods.JOBSET_GLOBAL_INDEX: "1"}},
            "spec": {"nodeName": "kwok-node-2", "containers": [{"name": "trainer"}]},
            "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {"terminated": {
                "exitCode": 137, "reason": "Error", "finishedAt": "2026-12-01T20:00:05Z"}}}]}}
    assert book.target is not None
    seen: list[pods.Target] = []
    book.source.ended = lambda target: seen.append(target) or [body]
    expected = [("trainguard: pod train-w-0-1 container trainer on kwok-node-2 ended: reason=Error exitCode=137 "
                 "signal=SIGKILL", "kwok-node-2", 1)]
    assert await _texts(book) == expected
    assert seen == [book.target]
    book._note(body)  # the book's own watch, later
    assert await _texts(book) == []


def test_timestamps_are_split_from_the_text() -> None:
    assert pods.split_timestamp("2026-12-01T20:00:00.000000001Z hello world") == (T0 + 1, "hello world")
    assert pods.split_timestamp("no timestamp here") == (None, "no timestamp here")


async def test_one_engine_routes_kubernetes_workloads_to_pod_logs_and_slurm_jobs_to_their_files(
        api: kubernetes_asyncio.client.ApiClient) -> None:
    signals_ = await kube_signals.open_signals(api)
    make = kube_signals.routed(signals_.log_books, sources.file_books)
    kube_book = make("k8s/team/JobSet/train", "k8s/team/JobSet/train", clock.ManualClock(0.0), None)
    slurm_book = make("slurm/4242", "4242", clock.ManualClock(0.0), None)
    assert isinstance(kube_book, podlogs.PodLogBook) and kube_book.kind == podlogs.KIND
    assert slurm_book.kind == sources.FILES
    assert [s.name for s in signals_.node_sources] == ["kubernetes-node-conditions"]
    await signals_.close()  # the operator's client stays open: it is not ours
    assert not api.rest_client.pool_manager.closed


async def test_the_pod_log_client_holds_a_stream_per_pod_without_queueing_behind_100(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pod watch and follow stream holds a connection while it runs: on the library's default pool of
    100, streams beyond ~50 one-pod workloads waited for one and timed out, and their crashes went unread
    (benchmarks/operator_jobsets.py at 500 and 2,000 JobSets). The pod-log client's pool is the config's."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    signals_ = await kube_signals.open_signals(kubeconfig=str(kubeconfig))
    try:
        limit = signals_.api.rest_client.pool_manager.connector.limit
        assert limit == podlog_parts.Config().max_connections >= 10_000
    finally:
        await signals_.close()
