"""Follow one job output file (Slurm ``StdOut``/``StdErr``) and hand new lines to detection.

The engine polls ``LogTailer.read_new()`` every few hundred milliseconds per tracked job; the
resulting ``signals.LogLine`` objects feed ``detect/`` (crash patterns, hang = silence). A
poll of an open file is one ``fstat`` plus, when it grew, one ``pread`` of the bytes added since
the last poll (``poll`` says when the path is looked up again).

What a Slurm output file does to a reader, and what we do:
- not created yet (job pending): no lines, no error;
- requeue with ``--open-mode=append``: the file grows; we simply continue;
- requeue without it (Slurm truncates): size below our offset -> restart at 0, with a marker;
- rotation/replacement (inode changed, or file deleted): finish the old file, reopen the new
  one from 0, with a marker;
- a partial last line: kept until its newline arrives, or flushed after ``partial_timeout``;
- binary junk: decoded with ``errors="replace"`` (detection cleans further);
- huge lines: at most ``max_line`` bytes kept, the rest dropped and counted in a marker; a
  line is never held whole in memory;
- truncated and rewritten past our offset between two polls (a requeue whose new attempt
  printed more than we had read): the bytes just before our offset no longer match their
  fingerprint -> restart at 0, with a marker.
``position()`` returns a small ``TailPosition`` the engine stores, so a restarted engine
resumes after the last line it handed out; its ``fingerprint`` (a hash of the bytes just
before ``offset``) tells a file that only grew from one that was truncated and rewritten
while we were stopped, which inode and size alone cannot.

File I/O runs on a thread (``signals.fileio``), never on the event loop: ``poll()`` is the
blocking read, ``read_new()`` awaits it with a timeout and never starts a second read of a
file whose previous read is still stuck (a hung NFS/Lustre mount).

Descriptors: a tailer keeps its file open between polls (so a rotated file's last lines are
still read) while the process's tailers hold fewer than half of ``RLIMIT_NOFILE``
(``DESCRIPTORS``); past that, a tailer opens its file for each poll and closes it after,
resuming at its position (inode, offset and fingerprint checked as after a restart). So the
number of followed files has no ceiling below the descriptor limit; the cost past it is an open
per poll, and a file rotated between two polls loses its unread end (read from the new file's
start, with a marker). A file that cannot be opened at all (the limit reached by others,
permissions) sets ``unreadable``, which the engine reports (log, metric, status).
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import threading
from collections.abc import Sequence
from typing import BinaryIO

from trainguard.model import clock as clock_mod
from trainguard.model import signals
from trainguard.signals import fileio
from trainguard.signals.positions import FINGERPRINT_BYTES, Mark, TailPosition, fingerprint_of, read_fingerprint

logger = logging.getLogger(__name__)

MARKER = "[trainguard]"
"""Prefix of the lines the tailer itself inserts (truncation, rotation, dropped bytes)."""

DEFAULT_MAX_LINE = 64 * 1024
"""Bytes kept per line: long enough for any stack-trace line, short enough to bound memory."""

DEFAULT_MAX_READ = 4 * 1024 * 1024
"""Bytes read per poll at most; a backlog is worked off over several polls, each one bounded."""

_CHUNK = 64 * 1024

PATH_CHECK_S = 1.0
"""How often an open file's path is looked up again (rotation, replacement, deletion); a file that
shrank is checked at once."""


class DescriptorBudget:
    """How many output files this process's tailers keep open between polls: at most half the
    soft ``RLIMIT_NOFILE`` (read at each open, so a raised limit applies at once), the other half
    left to the database, sockets and the reads of tailers beyond the budget."""

    def __init__(self) -> None:
        self.held = 0
        self._lock = threading.Lock()  # taken on the pool's threads, given back on the event loop

    def ceiling(self) -> int:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return 1 << 20
        return max(0, soft // 2)

    def take(self) -> bool:
        """One more file may stay open (True, counted) or must be closed after its poll (False)."""
        ceiling = self.ceiling()
        with self._lock:
            if self.held >= ceiling:
                return False
            self.held += 1
            return True

    def give(self) -> None:
        with self._lock:
            self.held = max(0, self.held - 1)


DESCRIPTORS = DescriptorBudget()
"""The process-wide budget of the tailers (one process, one descriptor table)."""


class LogTailer:
    """Incremental reader of one growing text file."""

    def __init__(
        self,
        path: str,
        clock: clock_mod.Clock,
        *,
        workload: str,
        source: str,
        position: TailPosition | None = None,
        max_line: int = DEFAULT_MAX_LINE,
        max_read: int = DEFAULT_MAX_READ,
        partial_timeout: float = 5.0,
        pool: fileio.FilePool | None = None,
        timeout: float = fileio.DEFAULT_TIMEOUT_S,
    ) -> None:
        self.path = path
        self.workload = workload
        self.source = source
        self._clock = clock
        self._max_line = max_line
        self._max_read = max_read
        self._partial_timeout = partial_timeout
        self._fh: BinaryIO | None = None
        self._inode: int | None = None
        self._offset = 0  # read pointer
        self._committed = 0  # just past the last line handed out
        self._lineno = 0
        self._frag = bytearray()
        self._dropped = 0
        self._frag_since: float | None = None
        self._raw_tail = b""  # the last FINGERPRINT_BYTES bytes before ``_offset``
        self._tail_at_commit = b""  # ... before ``_committed``
        self._line_ends: dict[int, tuple[int, bytes]] = {}  # lineno -> (committed, tail) of the last poll
        self._pool = pool
        self._timeout = timeout
        self._io: fileio.OneAtATime[list[signals.LogLine]] = fileio.OneAtATime(pool, timeout)
        self._closing = False
        self._held = False  # the open file counts in DESCRIPTORS and stays open between polls
        self._path_checked = float("-inf")  # when ``poll`` last looked the path up (``PATH_CHECK_S``)
        self.unreadable = ""
        """Why the file cannot be read now (e.g. no descriptor left); empty when it can (or does
        not exist yet, which is normal for a pending job)."""
        self._restore = position if position is not None and position.path == path else None
        if self._restore is not None:
            self._lineno = self._restore.lineno

    # ------------------------------------------------------------ public

    def position(self) -> TailPosition:
        return self.materialize((self._inode, self._committed, self._lineno, self._tail_at_commit))

    def position_after(self, lineno: int) -> TailPosition:
        """The position just past line ``lineno`` of the last read (``position()`` if unknown)."""
        return self.materialize(self.mark_after(lineno))

    def mark_after(self, lineno: int) -> Mark:
        """What ``position_after`` needs, without its hash: taken for every line handed out, while
        the position itself is only wanted when it is stored (``materialize``), every few seconds."""
        end = self._line_ends.get(lineno)
        if end is None:
            return (self._inode, self._committed, self._lineno, self._tail_at_commit)
        return (self._inode, end[0], lineno, end[1])

    def materialize(self, mark: Mark) -> TailPosition:
        """The ``TailPosition`` of a ``mark_after``."""
        inode, offset, lineno, tail = mark
        fingerprint = fingerprint_of(tail) if len(tail) == min(offset, FINGERPRINT_BYTES) else ""
        return TailPosition(self.path, inode, offset, lineno, fingerprint)

    @property
    def stuck(self) -> bool:
        """A read of this file is still hanging (no new read is started until it returns)."""
        return self._io.stuck

    async def read_new(self) -> list[signals.LogLine]:
        """Lines completed since the last call, read on a pool thread with a timeout.

        A read that times out is logged once and yields no lines; until it returns, no new
        read of this file starts. Its lines are handed out by the first call after it returns.
        """
        was_stuck = self._io.stuck_since is not None
        try:
            lines = await self._io.run(self.poll)
        except fileio.FileCallStuck as exc:
            return self._settle(was_stuck, [], exc)
        return self._settle(was_stuck, lines, None)

    def _settle(self, was_stuck: bool, lines: list[signals.LogLine],
                error: BaseException | None) -> list[signals.LogLine]:
        """After a read (or none): log a read that became stuck or works again; a close that waited."""
        if isinstance(error, fileio.FileCallStuck):
            if not was_stuck:
                logger.warning("reading %s of %s is stuck (%s); other files are read meanwhile", self.path,
                               self.workload, error)
            return []
        if was_stuck and self._io.stuck_since is None:
            logger.warning("reading %s of %s works again", self.path, self.workload)
        if self._closing and not self._io.stuck:
            self._closing = False
            self.close()
        if error is not None:
            raise error
        return lines

    @property
    def pool(self) -> fileio.FilePool | None:
        return self._pool

    def poll(self) -> list[signals.LogLine]:
        """The blocking part of ``read_new``: a bounded read of what was added.

        An open file costs one ``fstat``, and one ``pread`` when it grew (the bytes before our
        offset, to tell a truncated and rewritten file, and the new ones). Its path is looked up
        again (``stat``: rotation, replacement, deletion) every ``PATH_CHECK_S``, or at once when
        the file shrank. At 10,000 files a round, each call saved is a GIL hand-off of the pool
        thread; the price is that a replaced file is noticed up to ``PATH_CHECK_S`` late (its old
        file's last lines are read first, as before)."""
        out: list[signals.LogLine] = []
        self._line_ends = {}
        size: int | None = None
        if self._fh is not None:
            size = os.fstat(self._fh.fileno()).st_size
            now = self._clock.now()
            if size >= self._offset and now - self._path_checked < PATH_CHECK_S:
                if size > self._offset:
                    self._read_on(out, size)
                return self._finish(out)
            self._path_checked = now
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            self.unreadable = f"cannot stat {self.path}: {exc.strerror}"
            self._marker(out, self.unreadable)
            return out
        if self._fh is not None:
            if st is None or st.st_ino != self._inode:
                self._drain_old(out)
                size = None
                if st is not None:
                    self._marker(out, "output file was replaced; reading the new file from its start")
            elif size is not None and size < self._offset:
                self._reset_to_start()
                self._marker(out, "output file was truncated; reading from its start")
        if self._fh is None:
            if st is None or not self._open(out):
                return out
            size = None  # just opened: read to its end
        if size is None or size > self._offset:
            self._read_on(out, size)
        return self._finish(out)

    def _read_on(self, out: list[signals.LogLine], size: int | None) -> None:
        """``_read``; from the file's start, with a marker, when it was truncated and rewritten."""
        if not self._read(out, size):
            self._reset_to_start()
            self._marker(out, "output file was truncated; reading from its start")
            self._read(out, None)

    def _finish(self, out: list[signals.LogLine]) -> list[signals.LogLine]:
        self._flush_stale_fragment(out)
        if not self._held:
            self._let_go()
        return out

    def close(self) -> None:
        """Close the file; if a read is still stuck on it, close once that read returns."""
        if self._io.stuck:
            self._closing = True
            return
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._held:
            self._held = False
            DESCRIPTORS.give()

    def skip_to(self, position: TailPosition) -> None:
        """Continue at ``position`` next time (an attempt boundary found by the engine); no I/O."""
        self.close()
        self._restore = position
        self._lineno = position.lineno
        self._inode = None

    # ------------------------------------------------------------ internals

    def _let_go(self) -> None:
        """Beyond the descriptor budget: close the file after the poll and reopen it at this
        position next time (kept open while a partial line is pending, which is rare and short)."""
        if self._fh is None or self._frag or self._dropped:
            return
        n = min(self._offset, FINGERPRINT_BYTES)
        tail = self._raw_tail if len(self._raw_tail) == n else b""
        self._restore = TailPosition(self.path, self._inode, self._offset, self._lineno,
                                     fingerprint_of(tail) if n and tail else "")
        self._fh.close()
        self._fh = None

    def _open(self, out: list[signals.LogLine]) -> bool:
        try:
            self._fh = open(self.path, "rb")  # noqa: SIM115 - kept open across polls to survive rotation
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                self.unreadable = ""
            else:
                if exc.errno in (errno.EMFILE, errno.ENFILE) and not self.unreadable:
                    logger.error("cannot open %s of %s: %s (the process's descriptor limit, ulimit -n, is %d)",
                                 self.path, self.workload, exc.strerror,
                                 resource.getrlimit(resource.RLIMIT_NOFILE)[0])
                self.unreadable = f"cannot open {self.path}: {exc.strerror}"
                self._marker(out, self.unreadable)
            return False
        self.unreadable = ""
        self._held = DESCRIPTORS.take()
        fst = os.fstat(self._fh.fileno())
        self._inode = fst.st_ino
        start = 0
        restore, self._restore = self._restore, None
        if restore is not None:
            same = restore.inode is None or restore.inode == fst.st_ino
            if same and restore.offset <= fst.st_size and (
                not restore.fingerprint or read_fingerprint(self._fh, restore.offset) == restore.fingerprint
            ):
                start = restore.offset
            else:
                self._marker(out, "output file changed while we were stopped; reading from its start")
        self._offset = self._committed = start
        n = min(start, FINGERPRINT_BYTES)
        self._raw_tail = os.pread(self._fh.fileno(), n, start - n) if n else b""
        self._tail_at_commit = self._raw_tail
        self._frag.clear()
        self._dropped = 0
        self._frag_since = None
        return True

    def _reset_to_start(self) -> None:
        self._offset = self._committed = 0
        self._raw_tail = self._tail_at_commit = b""
        self._frag.clear()
        self._dropped = 0
        self._frag_since = None

    def _drain_old(self, out: list[signals.LogLine]) -> None:
        """The path now names another file (or none): read what is left of ours, then let go."""
        self._read(out, None)  # a rewritten old file: what it holds now is not ours to hand out
        if self._frag or self._dropped:
            self._emit(out)
        self.close()
        self._inode = None

    def _read(self, out: list[signals.LogLine], size: int | None) -> bool:
        """Read on from ``_offset`` (up to ``size`` when known, else to the end), at most
        ``max_read`` bytes. The first ``pread`` takes the bytes just before ``_offset`` too:
        False (nothing read) when they are no longer the ones we read, i.e. the file was
        truncated and rewritten past our offset between two polls."""
        assert self._fh is not None
        fd = self._fh.fileno()
        budget = self._max_read
        n = min(self._offset, FINGERPRINT_BYTES)
        check = n if len(self._raw_tail) == n else 0  # the bytes before the offset are known
        while budget > 0:
            want = min(budget, _CHUNK if size is None else max(size - self._offset, 1))
            data = os.pread(fd, check + want, self._offset - check)
            if check:
                if data[:check] != self._raw_tail:
                    return False
                data = data[check:]
                check = 0
            if not data:
                break
            budget -= len(data)
            self._feed(data, out)
            self._raw_tail = (self._raw_tail + data[-FINGERPRINT_BYTES:])[-FINGERPRINT_BYTES:]
            if size is not None and self._offset >= size:
                break
        return True

    def _feed(self, data: bytes, out: list[signals.LogLine]) -> None:
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                self._keep(data[start:])
                self._offset += len(data) - start
                return
            self._keep(data[start:nl])
            self._offset += nl + 1 - start
            # the bytes before this line's end (``_raw_tail`` ends where ``data`` begins)
            if nl + 1 >= FINGERPRINT_BYTES:
                self._tail_at_commit = data[nl + 1 - FINGERPRINT_BYTES : nl + 1]
            else:
                self._tail_at_commit = (self._raw_tail + data[: nl + 1])[-FINGERPRINT_BYTES:]
            self._emit(out)
            start = nl + 1

    def _keep(self, piece: bytes) -> None:
        if not piece:
            return
        if self._frag_since is None:
            self._frag_since = self._clock.now()
        room = self._max_line - len(self._frag)
        if room > 0:
            self._frag += piece[:room]
        self._dropped += max(0, len(piece) - max(room, 0))

    def _emit(self, out: list[signals.LogLine]) -> None:
        text = self._frag.decode("utf-8", errors="replace")
        if text.endswith("\r"):
            text = text[:-1]
        if self._dropped:
            text += f" {MARKER} {self._dropped} bytes of this line dropped"
        self._frag.clear()
        self._dropped = 0
        self._frag_since = None
        self._committed = self._offset
        self._append(out, text)

    def _flush_stale_fragment(self, out: list[signals.LogLine]) -> None:
        if self._frag_since is not None and self._clock.now() - self._frag_since >= self._partial_timeout:
            self._tail_at_commit = self._raw_tail
            self._emit(out)

    def _marker(self, out: list[signals.LogLine], what: str) -> None:
        self._append(out, f"{MARKER} {what}")

    def _append(self, out: list[signals.LogLine], text: str) -> None:
        self._lineno += 1
        self._line_ends[self._lineno] = (self._committed, self._tail_at_commit)
        out.append(signals.LogLine(text=text, lineno=self._lineno, received_at=self._clock.now(), source=self.source))


async def read_many(tailers: Sequence[LogTailer]) -> list[list[signals.LogLine] | OSError]:
    """``read_new`` of many tailers (a tailing round), with a few thread hand-offs for all of them.

    The tailers' reads share ``fileio.run_many`` lanes per (pool, timeout): at 10,000 files four
    rounds a second, one hand-off, task and timer per file was most of the engine's work, and a
    read queued behind thousands of others timed out before it started. A stuck read is reported
    as by ``read_new`` and holds up no other file; a read not run this round (its tailer busy, or
    every thread held by stuck reads) yields nothing now and reads the same bytes next round. A
    file whose read fails gets its ``OSError`` in its place.
    """
    out: list[list[signals.LogLine] | OSError] = [[] for _ in tailers]
    groups: dict[tuple[int, float], list[int]] = {}
    for i, t in enumerate(tailers):
        if t.pool is None:
            out[i] = await _read_one(t)
        else:
            groups.setdefault((id(t.pool), t._timeout), []).append(i)
    for (_pool, timeout), members in groups.items():
        pool = tailers[members[0]].pool
        assert pool is not None
        was_stuck = [tailers[i]._io.stuck_since is not None for i in members]
        outcomes = await fileio.run_many(pool, [(tailers[i]._io, tailers[i].poll) for i in members], timeout)
        for i, was, got in zip(members, was_stuck, outcomes, strict=True):
            t = tailers[i]
            if isinstance(got.error, fileio.FileCallNotRun):
                continue
            try:
                out[i] = t._settle(was, got.value or [], got.error)
            except OSError as exc:
                out[i] = exc
    return out


async def _read_one(t: LogTailer) -> list[signals.LogLine] | OSError:
    try:
        return await t.read_new()
    except OSError as exc:
        return exc
