"""The engine's book of one workload whose output is read from Loki (``signals.sources.LogBook``).

Place: under ``signals/``, chosen per installation (``loki_url``). ``signals.loki`` reads Loki
(catch-up, tail, de-duplication); this module charges its lines to the workload's output streams
and attempts, and keeps the positions a restarted engine resumes from (see ``LokiBook``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from trainguard.model import clock as clock_mod
from trainguard.model import signals
from trainguard.signals import fileio, sources
from trainguard.signals.loki import (
    DEFAULT_MAX_LINE,
    DEFAULT_PAGE_LIMIT,
    NS,
    SOURCE,
    LokiAuth,
    LokiClient,
    LokiEntry,
    LokiLabels,
    LokiReader,
)
from trainguard.signals.resume import Start
from trainguard.signals.tailer import MARKER, TailPosition


def selector(job_label: str, job_id: str, extra: str = "") -> str:
    """The LogQL stream selector of one job: its job label, plus the installation's extra matchers."""
    matchers = [f"{job_label}={json.dumps(job_id)}"]
    if extra.strip():
        matchers.append(extra.strip().strip("{}").strip())
    return "{" + ", ".join(matchers) + "}"


@dataclass(frozen=True)
class Config:
    """How to reach Loki and read a job's streams (``cli/config.py`` fills it from the settings)."""

    url: str
    selector: str = ""
    """Extra label matchers added to every job's selector, e.g. ``cluster="gpu-a"``."""
    labels: LokiLabels = field(default_factory=LokiLabels)
    path_label: str = "filename"
    """The label holding the output file a line was read from (promtail's default ``filename``)."""
    auth: LokiAuth = field(default_factory=LokiAuth)
    delay_for_s: int = 0
    page_limit: int = DEFAULT_PAGE_LIMIT
    since_s: float = 3600.0
    """How far back a job seen for the first time is read (its attempt's start bounds it further)."""
    max_line: int = DEFAULT_MAX_LINE
    timeout_s: float = 10.0
    max_backoff_s: float = 30.0
    max_buffer: int = 200_000
    """Lines held between two reads at most (the oldest are dropped, with a marker)."""


BOOK_HASH_CHARS = 16
BOOK_HASHES_KEPT = 4
"""Line hashes at the newest time kept in a stored position (16 hex each: the column holds 64)."""


@dataclass
class Stream:
    """One followed output stream of a workload (its path = the ``path_label`` value of its lines)."""

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


def _book_hash(entry: LokiEntry) -> str:
    raw = f"{entry.stream_key}\0{entry.line}".encode("utf-8", errors="surrogateescape")
    return hashlib.sha256(raw).hexdigest()[:BOOK_HASH_CHARS]


class LokiBook:
    """The followed output of one workload, read from Loki (``signals.sources.LogBook``).

    One ``LokiReader`` per book reads the job's selector (catch-up, then tail) in its own task
    from the first ``add`` on; ``read()`` hands its lines to the engine's tailing round.

    Position (a ``tailer.TailPosition``, stored in the tail-position table like a file's):
    ``offset`` is the time (ns) of the newest line handed to detection, ``inode`` how many lines
    at exactly that time were handed out, ``fingerprint`` the hashes of (up to four of) them,
    ``lineno`` the line count. A restarted engine reads from that time again and skips those.

    Attempts: a line belongs to the attempt running at its time, from the scheduler's start
    time of the attempt on (``place_at_start``, ``attempt_start``), as for the other log store.

    Node: the host label names the node of a line only for streams that are not the job's shared
    ``StdOut``/``StdErr`` file (per-node files, container logs): the shared file is written by the
    batch host for every rank, so there the rank/node prefix in the text decides. A rank label
    sets the line's rank.
    """

    kind = SOURCE

    def __init__(self, workload: str, job_id: str, clock: clock_mod.Clock, config: Config,
                 client: LokiClient) -> None:
        self.workload = workload
        self.job_id = job_id
        self._clock = clock
        self._config = config
        self.files: list[Stream] = []
        self.reader = LokiReader(client, selector(config.labels.job, job_id, config.selector), clock,
                                 labels=config.labels, since_s=config.since_s, page_limit=config.page_limit,
                                 delay_for_s=config.delay_for_s, max_line=config.max_line,
                                 backoff_s=(0.5, config.max_backoff_s))
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self.dropped = 0

    # -- following -----------------------------------------------------------------------------

    def add(self, path: str, source: str, start: Start | None = None) -> Stream:
        s = Stream(path, source, basis=start.basis if start is not None else "")
        if start is not None:
            self._place(s, start.position)
        else:
            s.consumed = TailPosition(path, 0, 0, 0, "")
        self.files.append(s)
        self.reader.start_at(min(f.floor for f in self.files) or None)
        if self._task is None:
            self._task = asyncio.ensure_future(self.reader.run(self._stop))
            self._task.set_name(f"loki:{self.workload}")
        return s

    def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _place(self, s: Stream, position: TailPosition) -> None:
        s.floor = position.offset
        hashes = position.fingerprint
        s.floor_hashes = frozenset(hashes[i:i + BOOK_HASH_CHARS] for i in range(0, len(hashes), BOOK_HASH_CHARS))
        s.lineno = position.lineno
        s.consumed = position

    # -- reading -------------------------------------------------------------------------------

    def _stream_of(self, path: str) -> tuple[Stream, bool]:
        """The followed stream a line belongs to, and whether it is that stream's own file."""
        for s in self.files:
            if path == s.path:
                return s, True
        base = os.path.basename(path)
        for s in self.files:
            if base and base == os.path.basename(s.path):
                return s, True
        return self.files[0], not path

    async def read(self) -> list[tuple[Stream, list[signals.LogLine]]]:
        """The lines the reader collected since the last round, each charged to its stream."""
        for s in self.files:
            s.lines = {}
        pending = self.reader.drain_entries()
        if not self.files:
            return []
        out: dict[int, list[signals.LogLine]] = {id(s): [] for s in self.files}
        if len(pending) > self._config.max_buffer:
            dropped = len(pending) - self._config.max_buffer
            pending = pending[dropped:]
            self._line(self.files[0], out, f"{MARKER} {dropped} log-store lines dropped (more than "
                       f"{self._config.max_buffer} waiting)")
        for entry, line in pending:
            labels = dict(entry.stream)
            s, own = self._stream_of(labels.get(self._config.path_label, ""))
            digest = _book_hash(entry)
            if entry.ns < s.floor or (entry.ns == s.floor and digest in s.floor_hashes):
                continue
            host = labels.get(self._config.labels.host) or None
            for part in line.text.split("\n"):
                self._line(s, out, part.rstrip("\r"), node=None if own else host, rank=line.rank,
                           key=(entry.ns, digest))
        return [(s, out[id(s)]) for s in self.files]

    def _line(self, s: Stream, out: dict[int, list[signals.LogLine]], text: str, *, node: str | None = None,
              rank: int | None = None, key: tuple[int, str] | None = None) -> None:
        s.lineno += 1
        if key is not None:
            s.lines[s.lineno] = key
        out[id(s)].append(signals.LogLine(text=text, lineno=s.lineno, received_at=self._clock.now(), source=s.source,
                                          node=node, rank=rank))

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
            full = len(old.fingerprint) >= BOOK_HASH_CHARS * BOOK_HASHES_KEPT
            hashes = old.fingerprint if full else old.fingerprint + digest
            f.consumed = TailPosition(f.path, (old.inode or 0) + 1, ns, line.lineno, hashes)
        else:  # a late line: the position stays at the newest time read
            f.consumed = TailPosition(f.path, old.inode, old.offset, line.lineno, old.fingerprint)

    # -- attempts ------------------------------------------------------------------------------

    async def observe_ends(self) -> None:
        """No attempt runs: nothing is read (lines stay with the reader until the attempt's start places them)."""

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
            placed.append((s, f"{s.path}: Loki lines from {at} ns on (the attempt's start)"))
        return placed

    def attempt_start(self, path: str, *, attempt: int, running: bool, started_at: float | None,
                      mine: Sequence[TailPosition], earlier: Sequence[TailPosition]) -> Start | None:
        lineno = earlier[-1].lineno if earlier else 0
        if mine:
            return Start(mine[-1], "stored")
        if not running:
            # not started yet: ``place_at_start`` sets its start once it runs
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

    def unsaved(self) -> list[Stream]:
        return [s for s in self.files if s.consumed is not None and s.consumed != s.saved]

    def mark_saved(self, files: list[Stream]) -> None:
        for s in files:
            s.saved = s.consumed


def books(config: Config) -> tuple[sources.BookFactory, LokiClient]:
    """A book factory for ``engine.Engine(log_books=...)`` and its shared client (close it at the end)."""
    client = LokiClient(config.url, auth=config.auth, timeout_s=config.timeout_s)

    def make(workload: str, job_id: str, clock: clock_mod.Clock, pool: fileio.FilePool | None) -> sources.LogBook:
        del pool  # no files
        return LokiBook(workload, job_id, clock, config, client)

    return make, client
