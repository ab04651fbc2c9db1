"""File I/O off the event loop: a small pool of daemon threads, and a guard per file.

Place in the loop: under ``signals/``; the tailers and the attempt-boundary scan run their
``stat``/``open``/``read`` calls here. Output files often live on NFS or Lustre, where one
call can hang for minutes; done on the event loop, that freezes discovery, the watchdog and
the operator's liveness probe with it. Here a call is awaited with a timeout instead:

- the pool is bounded (``DEFAULT_WORKERS`` threads), so hung calls cannot pile up threads;
- ``OneAtATime`` never starts a new call for a file whose previous call is still stuck, so
  one hung file holds at most one thread, and its late result is still delivered;
- the threads are daemon threads: a call stuck in the kernel must not keep the process from
  exiting (``concurrent.futures`` joins its workers at exit, which would hang for ever).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
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


class FileCallStuck(Exception):
    """A file call did not finish within its timeout (it keeps running in its thread)."""


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
        self._lock = asyncio.Lock()  # two coroutines (e.g. discovery and tailing) never run calls at once
        self.stuck_since: float | None = None
        """Loop time at which the current stuck call was reported; None when healthy."""

    @property
    def stuck(self) -> bool:
        return self._inflight is not None and not self._inflight.done()

    async def run(self, call: Callable[[], T]) -> T:
        async with self._lock:
            return await self._run(call)

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


def _consume(future: asyncio.Future[Any]) -> None:
    """Mark a late failure as retrieved (it is raised to the next ``run``)."""
    if not future.cancelled():
        future.exception()
