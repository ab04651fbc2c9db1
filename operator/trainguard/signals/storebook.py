"""What the books of the log-store sources share: lines charged to streams and attempts, and positions.

Place: under ``signals/``, beside the sources that use it (``signals.loki_book``,
``signals.victorialogs``). Both read a job's output lines from a server, not from files, so both
keep the same per-stream book: which followed stream a line belongs to, the line numbers handed
out, the position a restarted engine resumes from, and the attempt boundary. Only how lines arrive
(and what a placed attempt start is called in the log) differs; that stays with each source.

Position (a ``positions.TailPosition``, stored in the tail-position table like a file's): ``offset``
is the time (ns) of the newest line handed to detection, ``inode`` how many lines at exactly that
time were handed out, ``fingerprint`` the hashes of (up to ``HASHES_KEPT`` of) them, ``lineno``
the line count. A restarted engine reads from that time again and skips those.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from trainguard.model import clock as clock_mod
from trainguard.model import signals, times
from trainguard.signals.positions import TailPosition
from trainguard.signals.resume import Start

NS = times.NS
HASH_CHARS = 16
HASHES_KEPT = 4
"""Line hashes at the newest time kept in a stored position (16 hex each: the column holds 64)."""


@dataclass
class Stream:
    """One followed output stream of a workload (its path = the path label/field of its lines)."""

    path: str
    source: str
    consumed: TailPosition | None = None
    basis: str = ""
    saved: TailPosition | None = None
    floor: int = 0
    """Lines before this time (ns) are not this attempt's, or were read before a restart."""
    floor_hashes: frozenset[str] = frozenset()
    """Hashes of lines at exactly ``floor`` handed out before a restart (not to be read again)."""
    lineno: int = 0
    lines: dict[int, tuple[int, str]] = field(default_factory=dict)
    """lineno -> (ns, hash) of the lines of the last read, for ``consume``."""


Out = dict[int, list[signals.LogLine]]
"""The lines of one read, per stream (keyed by ``id`` of the stream)."""


class StoreBook:
    """The per-workload book a log-store source builds on (``signals.sources.LogBook`` but the reading).

    A subclass supplies ``read`` and ``observe_ends`` (how lines arrive), may hook ``_following``
    (called after each ``add``) and names a placed attempt start in ``_placed_text``.
    """

    def __init__(self, workload: str, job_id: str, clock: clock_mod.Clock) -> None:
        self.workload = workload
        self.job_id = job_id
        self._clock = clock
        self.files: list[Stream] = []

    # -- following -----------------------------------------------------------------------------

    def add(self, path: str, source: str, start: Start | None = None) -> Stream:
        s = Stream(path, source, basis=start.basis if start is not None else "")
        if start is not None:
            self._place(s, start.position)
        else:
            s.consumed = TailPosition(path, 0, 0, 0, "")
        self.files.append(s)
        self._following()
        return s

    def _following(self) -> None:
        """After a stream was added: a source that reads from the start on starts here."""

    def _place(self, s: Stream, position: TailPosition) -> None:
        s.floor = position.offset
        hashes = position.fingerprint
        s.floor_hashes = frozenset(hashes[i:i + HASH_CHARS] for i in range(0, len(hashes), HASH_CHARS))
        s.lineno = position.lineno
        s.consumed = position

    # -- reading -------------------------------------------------------------------------------

    def _stream_of(self, path: str) -> tuple[Stream, bool]:
        """The followed stream a line of ``path`` belongs to, and whether it is that stream's own file."""
        for s in self.files:
            if path == s.path:
                return s, True
        base = os.path.basename(path)
        for s in self.files:
            if base and base == os.path.basename(s.path):
                return s, True
        return self.files[0], not path

    @staticmethod
    def _read_before(s: Stream, ns: int, digest: str) -> bool:
        """Whether a line is before the stream's floor, or was handed out before a restart."""
        return ns < s.floor or (ns == s.floor and digest in s.floor_hashes)

    def _line(self, s: Stream, out: Out, text: str, *, node: str | None = None, rank: int | None = None,
              key: tuple[int, str] | None = None, now: float | None = None) -> None:
        """Hand out one line of ``s`` (``key``: its (ns, hash), for ``consume``; ``now``: its receipt time,
        the clock's now when not given)."""
        s.lineno += 1
        if key is not None:
            s.lines[s.lineno] = key
        out[id(s)].append(signals.LogLine(text=text, lineno=s.lineno,
                                          received_at=self._clock.now() if now is None else now,
                                          source=s.source, node=node, rank=rank))

    def consume(self, f: Stream, line: signals.LogLine) -> None:
        """``line`` was handed to detection: a restart resumes after it."""
        key = f.lines.get(line.lineno)
        old = f.consumed
        if key is None or old is None:
            if old is not None:
                f.consumed = TailPosition(f.path, old.inode, old.offset, line.lineno, old.fingerprint)
            return
        ns, digest = key
        if ns > old.offset:
            f.consumed = TailPosition(f.path, 1, ns, line.lineno, digest)
        elif ns == old.offset:
            full = len(old.fingerprint) >= HASH_CHARS * HASHES_KEPT
            hashes = old.fingerprint if full else old.fingerprint + digest
            f.consumed = TailPosition(f.path, (old.inode or 0) + 1, ns, line.lineno, hashes)
        else:  # a late line: the position stays at the newest time read
            f.consumed = TailPosition(f.path, old.inode, old.offset, line.lineno, old.fingerprint)

    # -- attempts ------------------------------------------------------------------------------

    def _placed_text(self, s: Stream, at: int) -> str:
        """The log text saying that ``s`` is read from ``at`` (ns), the attempt's start, on."""
        return f"{s.path}: lines from {at} ns on (the attempt's start)"

    def place_at_start(self, started_at: float | None) -> list[tuple[Stream, str]]:
        if started_at is None:
            return []
        at = int(started_at) * NS
        placed = []
        for s in self.files:
            if s.floor < at:
                s.floor, s.floor_hashes = at, frozenset()
                s.consumed = TailPosition(s.path, 0, at, s.lineno, "")
                s.basis = "started_at"
            placed.append((s, self._placed_text(s, at)))
        return placed

    def attempt_start(self, path: str, *, attempt: int, running: bool, started_at: float | None,
                      mine: Sequence[TailPosition], earlier: Sequence[TailPosition]) -> Start | None:
        """A line belongs to the attempt running at its time: from the scheduler's start time of the
        attempt on (like the file book's attempt boundary)."""
        lineno = earlier[-1].lineno if earlier else 0
        if mine:
            return Start(mine[-1], "stored")
        if not running:
            # the attempt has not started: ``place_at_start`` sets its start once it runs
            return Start(TailPosition(path, 0, int(self._clock.now() * NS), lineno, ""), "pending")
        if started_at is not None:
            return Start(TailPosition(path, 0, int(started_at) * NS, lineno, ""), "started_at")
        if earlier:
            return Start(earlier[-1], "observed")
        return Start(TailPosition(path, 0, 0, 0, ""), "first_attempt")

    # -- the rest of the seam ------------------------------------------------------------------

    async def run(self, call: Callable[[], Start]) -> Start | None:
        """Not used for a log store (no files to look at)."""
        return None

    def set_basis(self, basis: str) -> None:
        for s in self.files:
            s.basis = basis

    def attempt_replaced(self, at: float) -> None:
        """Nothing to drop: a log store's rows (a Slurm job's) of a new attempt come after it was pending,
        and its first rows may be stamped before we saw it run. ``PodLogBook`` overrides this."""
        del at

    def unsaved(self) -> list[Stream]:
        return [s for s in self.files if s.consumed is not None and s.consumed != s.saved]

    def mark_saved(self, files: list[Stream]) -> None:
        for s in files:
            s.saved = s.consumed
