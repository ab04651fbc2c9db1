"""File I/O off the event loop: a small pool of daemon threads, and a guard per file.

Place in the loop: under ``signals/``; the tailers and the attempt-boundary scan run their
``stat``/``open``/``read`` calls here. Output files often live on NFS or Lustre, where one
call can hang for minutes; done on the event loop, that freezes discovery, the watchdog and
the operator's liveness probe with it. Here a call is awaited with a timeout instead:

- the pool is bounded (``DEFAULT_WORKERS`` threads), so hung calls cannot pile up threads;
- ``OneAtATime`` never starts a new call for a file whose previous call is still stuck, so
  one hung file holds at most one thread, and its late result is still delivered;
- the threads are daemon threads: a call stuck in the kernel must not keep the process from
  exiting (``concurrent.futures`` joins its workers at exit, which would hang for ever);
- ``run_many`` runs one call per guard for many files (a tailing round) with a handful of thread
  hand-offs instead of one per file: each of up to ``workers`` lanes takes the next call from
  the shared list until none is left, and a call's timeout runs from when a lane *starts* it,
  so a long list waiting behind a busy pool is not mistaken for hung files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
logger = logging.getLogger(__name__)

DEFAULT_WORKERS = 4
"""Threads for file I/O: local reads take microseconds, so a few threads serve many files;
more than one so that a single hung file system mount does not stop the others."""

DEFAULT_TIMEOUT_S = 5.0
"""How long one round waits for one file call before reporting it stuck and moving on.
Far above a healthy read (milliseconds even on a loaded NFS server), short enough that a
tailing round is never held up long."""


BATCH_PER_LANE = 64
"""Calls per lane below which ``run_many`` uses fewer lanes than threads (a handful of files
need no four thread hand-offs)."""


class FileCallStuck(Exception):
    """A file call did not finish within its timeout (it keeps running in its thread)."""


class FileCallNotRun(Exception):
    """``run_many`` did not run this call: its guard was busy with another call, or every pool
    thread stayed busy (stuck) for a whole timeout before the call's turn came. Nothing was read;
    the next round tries again."""


class FilePool:
    """Up to ``workers`` daemon threads running blocking file calls for the event loop.

    Threads start when calls wait and no thread is idle, and end after ``idle_s`` without work,
    so an idle engine (or a test that made many engines) keeps none.
    """

    def __init__(self, workers: int = DEFAULT_WORKERS, *, idle_s: float = 10.0) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._workers = workers
        self._idle_s = idle_s
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._closed = False

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self._idle_s)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():  # nothing came meanwhile (submit puts under this lock)
                        self._idle -= 1
                        self._threads -= 1
                        return
                continue
            with self._lock:
                self._idle -= 1
            if job is None:
                with self._lock:
                    self._threads -= 1
                return
            call, loop, future = job
            try:
                result: object = call()
            except BaseException as exc:  # handed to the awaiting coroutine
                _deliver(loop, future, None, exc)
            else:
                _deliver(loop, future, result, None)
            with self._lock:
                self._idle += 1

    @property
    def workers(self) -> int:
        return self._workers

    def submit(self, call: Callable[[], T]) -> asyncio.Future[T]:
        """Run ``call`` on a pool thread; the returned future resolves on the running loop."""
        if self._closed:
            raise RuntimeError("file pool is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._jobs.put((call, loop, future))  # type: ignore[arg-type]
            if self._idle == 0 and self._threads < self._workers:
                self._threads += 1
                self._idle += 1
                threading.Thread(target=self._work, name="tg-file-io", daemon=True).start()
        return future

    def close(self) -> None:
        """Let idle threads end; a thread stuck in a call ends with the process (daemon)."""
        with self._lock:
            self._closed = True
            for _ in range(self._threads):
                self._jobs.put(None)


_Job = tuple[Callable[[], object], asyncio.AbstractEventLoop, "asyncio.Future[object]"]


def _deliver(loop: asyncio.AbstractEventLoop, future: asyncio.Future[object], result: object,
             error: BaseException | None) -> None:
    def settle() -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    with contextlib.suppress(RuntimeError):  # a closed loop (process shutting down): nobody waits any more
        loop.call_soon_threadsafe(settle)


class OneAtATime(Generic[T]):
    """At most one call in flight for one file; a stuck call's result is collected later.

    ``run`` returns the call's result, or raises ``FileCallStuck`` when it takes longer than
    ``timeout``; while that call is still running, ``run`` raises ``FileCallStuck`` at once
    without starting another. Calls of one guard never overlap (the state they work on, e.g. a
    tailer's, is not shared between threads). When the stuck call finishes, the next ``run`` returns ITS
    result (nothing read is lost) and the caller polls again on its next round.
    """

    def __init__(self, pool: FilePool | None, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self._pool = pool
        self._timeout = timeout
        self._inflight: asyncio.Future[T] | None = None
        self._busy = False  # a call is being run (two coroutines, e.g. discovery and tailing, never run calls at once)
        self._freed: asyncio.Event | None = None
        self.stuck_since: float | None = None
        """Loop time at which the current stuck call was reported; None when healthy."""

    @property
    def stuck(self) -> bool:
        return self._inflight is not None and not self._inflight.done()

    async def run(self, call: Callable[[], T]) -> T:
        while self._busy:
            if self._freed is None:
                self._freed = asyncio.Event()
            await self._freed.wait()
        self._busy = True
        try:
            return await self._run(call)
        finally:
            self._release()

    def _claim(self) -> bool:
        """Take the guard without waiting (``run_many``); False when a call is being run."""
        if self._busy:
            return False
        self._busy = True
        return True

    def _release(self) -> None:
        self._busy = False
        if self._freed is not None:
            self._freed.set()
            self._freed = None

    def _take_late(self) -> tuple[bool, T | None, BaseException | None]:
        """A stuck call's outcome once it has returned: (True, result, error); (False, ...) while it
        still runs (raises nothing; the caller reports it stuck)."""
        assert self._inflight is not None
        if not self._inflight.done():
            return False, None, None
        future, self._inflight = self._inflight, None
        self.stuck_since = None
        if future.cancelled():
            return True, None, asyncio.CancelledError()
        error = future.exception()
        return True, (future.result() if error is None else None), error

    def _stuck(self, future: asyncio.Future[T], now: float) -> None:
        self._inflight = future
        future.add_done_callback(_consume)
        self.stuck_since = now

    async def _run(self, call: Callable[[], T]) -> T:
        if self._inflight is not None:
            if not self._inflight.done():
                raise FileCallStuck("previous call still running")
            future, self._inflight = self._inflight, None
            self.stuck_since = None
            return future.result()
        future = asyncio.ensure_future(asyncio.to_thread(call)) if self._pool is None else self._pool.submit(call)
        try:
            return await asyncio.wait_for(asyncio.shield(future), self._timeout)
        except TimeoutError:
            self._inflight = future
            future.add_done_callback(_consume)
            self.stuck_since = asyncio.get_running_loop().time()
            raise FileCallStuck(f"no answer within {self._timeout:g} s") from None


@dataclass(slots=True)
class Outcome(Generic[T]):
    """What ``run_many`` got for one guard: ``value``, or ``error`` (``FileCallStuck``,
    ``FileCallNotRun`` or what the call raised)."""

    value: T | None = None
    error: BaseException | None = None


async def run_many(pool: FilePool, items: Sequence[tuple[OneAtATime[T], Callable[[], T]]],
                   limit_s: float = DEFAULT_TIMEOUT_S) -> list[Outcome[T]]:
    """One call per guard, with the rules of ``OneAtATime.run``, on at most ``pool.workers`` lanes.

    A guard whose previous call is still stuck gets ``FileCallStuck`` at once (no new call); one
    whose stuck call has returned gets that call's outcome (nothing read is lost). The others'
    calls are shared out to the lanes; a call still running ``limit_s`` after its lane started
    it is reported stuck and keeps its lane's thread, while the other lanes go on with the rest.
    Costs one thread hand-off per lane and one wake-up of the loop per round, not one per file.
    A lane held by a stuck call is replaced (the pool's thread limit permitting); calls that no
    thread could start within ``limit_s`` get ``FileCallNotRun``.
    """
    loop = asyncio.get_running_loop()
    out: list[Outcome[T]] = [Outcome() for _ in items]
    todo: list[int] = []
    for i, (guard, _call) in enumerate(items):
        if not guard._claim():
            out[i].error = FileCallNotRun("another call of this file is running")
        elif guard._inflight is not None:
            returned, value, error = guard._take_late()
            guard._release()
            out[i].value, out[i].error = value, (error if returned else FileCallStuck("previous call still running"))
        else:
            todo.append(i)
    if not todo:
        return out
    lanes = min(pool.workers, math.ceil(len(todo) / BATCH_PER_LANE))
    batch = _Batch([items[i][1] for i in todo], loop)
    try:
        for _ in range(lanes):
            pool.submit(batch.work)
        await batch.wait(pool, limit_s)
    finally:
        with batch.lock:
            batch.abandoned = True  # nothing more starts (set by ``wait`` already, unless it was cancelled)
            for k, i in enumerate(todo):
                guard = items[i][0]
                if k in batch.late:
                    guard._stuck(batch.late[k], loop.time())
                    out[i].error = FileCallStuck(f"no answer within {limit_s:g} s")
                elif k in batch.results:
                    out[i].value, out[i].error = batch.results[k]
                elif k in batch.running:  # only when cancelled: collect it like a stuck call
                    late: asyncio.Future[Any] = loop.create_future()
                    batch.late[k] = late
                    guard._stuck(late, loop.time())
                    out[i].error = FileCallStuck("the round was cancelled")
                else:
                    out[i].error = FileCallNotRun("every file thread stayed busy")
                guard._release()
    return out


class _Batch:
    """The calls of one ``run_many``, taken in turn by the lanes (pool threads)."""

    def __init__(self, calls: list[Callable[[], Any]], loop: asyncio.AbstractEventLoop) -> None:
        self.calls = calls
        self.loop = loop
        self.lock = threading.Lock()
        self.next = 0
        self.running: dict[int, float] = {}  # index -> monotonic time its lane started it
        self.results: dict[int, tuple[Any, BaseException | None]] = {}
        self.late: dict[int, asyncio.Future[Any]] = {}  # declared stuck: their outcome goes here
        self.abandoned = False
        self.progress_at = time.monotonic()  # a lane last took or finished a call
        self.resolved = 0  # finished, or declared stuck
        self.done: asyncio.Future[None] = loop.create_future()

    def work(self) -> None:
        """A lane: run calls until none is left (on a pool thread)."""
        while True:
            with self.lock:
                if self.abandoned or self.next >= len(self.calls):
                    return
                k = self.next
                self.next += 1
                self.progress_at = self.running[k] = time.monotonic()
            value: Any = None
            error: BaseException | None = None
            try:
                value = self.calls[k]()
            except BaseException as exc:  # handed to the caller
                error = exc
            with self.lock:
                del self.running[k]
                self.progress_at = time.monotonic()
                late = self.late.get(k)
                if late is None:
                    self.results[k] = (value, error)
                    self.resolved += 1
                    complete = self.resolved == len(self.calls)
            if late is not None:
                _deliver(self.loop, late, value, error)
            elif complete:
                _deliver(self.loop, self.done, None, None)  # type: ignore[arg-type]

    async def wait(self, pool: FilePool, limit_s: float) -> None:
        """Until every call finished or was declared stuck, or no lane could start one for ``limit_s``.
        A lane whose call is declared stuck is replaced by a new one while calls are left."""
        while True:
            now = time.monotonic()
            with self.lock:
                for k, started in self.running.items():
                    if k not in self.late and now - started >= limit_s:
                        self.late[k] = self.loop.create_future()
                        self.resolved += 1
                        if self.next < len(self.calls):
                            pool.submit(self.work)
                            self.progress_at = now  # the new lane gets a whole timeout to start
                if self.resolved == len(self.calls):
                    self.abandoned = True
                    return
                active = [started for k, started in self.running.items() if k not in self.late]
                if not active and now - self.progress_at >= limit_s:
                    self.abandoned = True  # every thread is held by stuck calls: the rest waits for the next round
                    return
                deadline = min(active) + limit_s if active else self.progress_at + limit_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.done), max(0.0, deadline - now) + 0.001)


def _consume(future: asyncio.Future[Any]) -> None:
    """Mark a late failure as retrieved (it is raised to the next ``run``)."""
    if not future.cancelled():
        future.exception()
