"""The output files of one workload: their tailers, how far detection got, and where an attempt starts.

Place in the loop: under ``signals/``, one ``TailBook`` per tracked workload, owned by the engine.
It adds to ``tailer.LogTailer`` what a restart needs:

- ``consumed``: per file, the position just past the last line handed to detection (not the
  tailer's read position: a batch read in one round may be handed out over several steps, and a
  decision taken half-way must not store the rest as done);
- ``observe_ends``: while no attempt of the job is running (pending or requeued, first seen after
  a restart), nothing is read: whatever the file holds belongs to earlier attempts. Instead the
  file's end is observed each round (a stat and a small read on a pool thread), so that when the
  attempt starts, its output begins at the last end observed *before* the scheduler's start time;
- ``unsaved``: positions that moved since they were last stored, for one write per round.

All file I/O goes through the tailers' pool threads with a timeout (``signals.fileio``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from trainguard.model import clock as clock_mod
from trainguard.model import signals
from trainguard.signals import fileio, resume
from trainguard.signals.positions import Mark, TailPosition
from trainguard.signals.tailer import LogTailer, read_many

logger = logging.getLogger(__name__)

END_HISTORY = 256
"""End observations kept per file while no attempt runs (about a minute at 0.25 s rounds): the
scheduler's start time is compared with them once discovery sees the attempt running."""


@dataclass
class Followed:
    """One output file of the workload."""

    tailer: LogTailer
    source: str
    _consumed: TailPosition | None = None
    basis: str = ""
    """How the current attempt's start in this file was found (``signals.resume``)."""
    saved: TailPosition | None = None
    ends: collections.deque[tuple[float, TailPosition]] = field(
        default_factory=lambda: collections.deque(maxlen=END_HISTORY))
    end_guard: fileio.OneAtATime[resume.Start] | None = None
    _mark: Mark | None = None
    """The last line handed out, not yet made a ``TailPosition`` (``consume`` runs for every line;
    the position's hash is only needed when it is stored)."""

    @property
    def path(self) -> str:
        return self.tailer.path

    @property
    def consumed(self) -> TailPosition | None:
        """Just past the last line handed to detection; None until something was read or placed."""
        if self._mark is not None:
            self._consumed, self._mark = self.tailer.materialize(self._mark), None
        return self._consumed

    @consumed.setter
    def consumed(self, position: TailPosition | None) -> None:
        self._consumed, self._mark = position, None


class TailBook:
    """The followed output files of one workload (the file implementation of ``sources.LogBook``)."""

    kind = "files"

    def __init__(self, workload: str, clock: clock_mod.Clock, *, pool: fileio.FilePool | None = None,
                 timeout: float = fileio.DEFAULT_TIMEOUT_S) -> None:
        self.workload = workload
        self._clock = clock
        self._pool = pool
        self._timeout = timeout
        self.files: list[Followed] = []

    def add(self, path: str, source: str, start: resume.Start | None = None) -> Followed:
        position = start.position if start is not None else None
        t = LogTailer(path, self._clock, workload=self.workload, source=source, position=position,
                             pool=self._pool, timeout=self._timeout)
        f = Followed(t, source, _consumed=position, basis=start.basis if start is not None else "",
                     end_guard=fileio.OneAtATime(self._pool, self._timeout))
        self.files.append(f)
        return f

    def close(self) -> None:
        for f in self.files:
            f.tailer.close()

    async def run(self, call: Callable[[], resume.Start]) -> resume.Start | None:
        """One blocking call of ``signals.resume`` on the pool, with the timeout; None when stuck."""
        guard: fileio.OneAtATime[resume.Start] = fileio.OneAtATime(self._pool, self._timeout)
        try:
            return await guard.run(call)
        except fileio.FileCallStuck as exc:
            logger.warning("cannot look at the output of %s (%s): reading starts at the file's end", self.workload,
                           exc)
            return None

    # -- reading ---------------------------------------------------------------------------------

    async def read(self) -> list[tuple[Followed, list[signals.LogLine]]]:
        """New lines of every file, read concurrently (a stuck file yields none and holds up nothing)."""
        return (await read_books([self]))[0]

    def consume(self, f: Followed, line: signals.LogLine) -> None:
        """``line`` was handed to detection: a restart resumes after it."""
        f._mark = f.tailer.mark_after(line.lineno)

    # -- no attempt running ------------------------------------------------------------------------

    async def observe_ends(self) -> None:
        """Where each file ends now (nothing is read): the next attempt starts after it."""
        async def one(f: Followed) -> None:
            assert f.end_guard is not None
            try:
                start = await f.end_guard.run(lambda: resume.pending_start(f.path))
            except fileio.FileCallStuck:
                return
            except OSError as exc:
                logger.warning("cannot look at %s of %s: %s", f.path, self.workload, exc.strerror)
                return
            f.ends.append((self._clock.now(), start.position))
            f.consumed, f.basis = start.position, start.basis

        await asyncio.gather(*(one(f) for f in self.files))

    def place_at_start(self, started_at: float | None) -> list[tuple[Followed, str]]:
        """The attempt now runs: each file continues at the last end observed before ``started_at``.

        Returns (file, description) for the log. Without observations (nothing seen while the job
        waited) a file keeps the position it had. Slurm's start time has whole seconds: only
        observations before that second count, so the old attempt's last lines are never charged.
        """
        placed: list[tuple[Followed, str]] = []
        for f in self.files:
            if not f.ends:
                continue
            chosen: TailPosition | None = None
            for at, position in f.ends:
                if started_at is None or at < started_at:
                    chosen = position
            if chosen is None:
                # Every observation came after the start: the earliest bounds the old output best,
                # and anything the attempt printed before it is not charged (the safe side).
                chosen = f.ends[0][1]
                f.basis = "unknown"
                how = (f"{f.path}: attempt started at {started_at:.0f} before our first look; "
                       f"reading from byte {chosen.offset}, earlier bytes not charged to it")
            else:
                f.basis = "pending"
                how = f"{f.path}: from byte {chosen.offset} (its end while the job waited)"
            f.ends.clear()
            f.tailer.skip_to(chosen)
            f.consumed = chosen
            placed.append((f, how))
        return placed

    def set_basis(self, basis: str) -> None:
        for f in self.files:
            f.basis = basis

    def attempt_replaced(self, at: float) -> None:
        """Nothing to drop (files: their order is the byte order)."""
        del at

    # -- saving ------------------------------------------------------------------------------------

    def unsaved(self) -> list[Followed]:
        """Files whose consumed position moved since it was last stored."""
        return [f for f in self.files if f.consumed is not None and f.consumed != f.saved]

    def mark_saved(self, files: list[Followed]) -> None:
        for f in files:
            f.saved = f.consumed

    def attempt_start(self, path: str, *, attempt: int, running: bool, started_at: float | None,
                      mine: Sequence[TailPosition], earlier: Sequence[TailPosition]) -> resume.Start | None:
        """Not used for files: the engine finds the start in the file itself (``signals.resume``)."""
        raise NotImplementedError("the engine resumes files through signals.resume")


async def read_books(books: Sequence[TailBook]) -> list[list[tuple[Followed, list[signals.LogLine]]]]:
    """``TailBook.read`` of many books in one batch of reads (``tailer.read_many``): the tailing
    round of the engine. A file that cannot be read is logged and yields no lines this round."""
    snapshot = [list(b.files) for b in books]  # a file added during the reads waits for the next round
    got = await read_many([f.tailer for files in snapshot for f in files])
    out: list[list[tuple[Followed, list[signals.LogLine]]]] = []
    k = 0
    for b, files in zip(books, snapshot, strict=True):
        mine: list[tuple[Followed, list[signals.LogLine]]] = []
        for f in files:
            lines = got[k]
            k += 1
            if isinstance(lines, OSError):
                logger.warning("cannot read %s of %s: %s", f.path, b.workload, lines)
                lines = []
            mine.append((f, lines))
        out.append(mine)
    return out
