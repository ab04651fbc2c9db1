"""The engine's book of one workload whose output is read from Loki (``signals.sources.LogBook``).

Place: under ``signals/``, chosen per installation (``loki_url``). ``signals.loki`` reads Loki
(catch-up, tail, de-duplication); this module charges its lines to the workload's output streams
and attempts, and keeps the positions a restarted engine resumes from (see ``LokiBook``).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from trainguard.model import clock as clock_mod
from trainguard.model import signals
from trainguard.signals import fileio, linehash, sources
from trainguard.signals.loki import (
    DEFAULT_MAX_LINE,
    DEFAULT_PAGE_LIMIT,
    SOURCE,
    LokiAuth,
    LokiClient,
    LokiEntry,
    LokiLabels,
    LokiReader,
)
from trainguard.signals.storebook import HASH_CHARS, Out, StoreBook, Stream
from trainguard.signals.tailer import MARKER


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


BOOK_HASH_CHARS = HASH_CHARS


def _book_hash(entry: LokiEntry) -> str:
    return linehash.digest(entry.stream_key, entry.line, chars=BOOK_HASH_CHARS)


class LokiBook(StoreBook):
    """The followed output of one workload, read from Loki (``signals.sources.LogBook``).

    One ``LokiReader`` per book reads the job's selector (catch-up, then tail) in its own task
    from the first ``add`` on; ``read()`` hands its lines to the engine's tailing round.

    Position and attempts: as for the other log store (``signals.storebook``).

    Node: the host label names the node of a line only for streams that are not the job's shared
    ``StdOut``/``StdErr`` file (per-node files, container logs): the shared file is written by the
    batch host for every rank, so there the rank/node prefix in the text decides. A rank label
    sets the line's rank.
    """

    kind = SOURCE

    def __init__(self, workload: str, job_id: str, clock: clock_mod.Clock, config: Config,
                 client: LokiClient) -> None:
        super().__init__(workload, job_id, clock)
        self._config = config
        self.reader = LokiReader(client, selector(config.labels.job, job_id, config.selector), clock,
                                 labels=config.labels, since_s=config.since_s, page_limit=config.page_limit,
                                 delay_for_s=config.delay_for_s, max_line=config.max_line,
                                 max_pending=config.max_buffer,
                                 backoff_s=(0.5, config.max_backoff_s))
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self.dropped = 0

    # -- following -----------------------------------------------------------------------------

    def _ensure_reading(self) -> None:
        """Start the reader on the first round that wants lines, once every stream is added and placed:
        its first catch-up starts at the earliest stream's floor."""
        if self._task is None and self.files:
            self.reader.start_at(min(f.floor for f in self.files) or None)
            self._task = asyncio.ensure_future(self.reader.run(self._stop))
            self._task.set_name(f"loki:{self.workload}")

    def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            self._task = None

    # -- reading -------------------------------------------------------------------------------

    async def read(self) -> list[tuple[Stream, list[signals.LogLine]]]:
        """The lines the reader collected since the last round, each charged to its stream."""
        self._ensure_reading()
        for s in self.files:
            s.lines = {}
        pending = self.reader.drain_entries()
        if not self.files:
            return []
        out: Out = {id(s): [] for s in self.files}
        if self.reader.overflow:
            self._line(self.files[0], out, f"{MARKER} {self.reader.overflow} log-store lines dropped (more than "
                       f"{self._config.max_buffer} waiting)")
            self.reader.overflow = 0
        for entry, line in pending:
            labels = dict(entry.stream)
            s, own = self._stream_of(labels.get(self._config.path_label, ""))
            digest = _book_hash(entry)
            if self._read_before(s, entry.ns, digest):
                continue
            host = labels.get(self._config.labels.host) or None
            for part in line.text.split("\n"):
                self._line(s, out, part.rstrip("\r"), node=None if own else host, rank=line.rank,
                           key=(entry.ns, digest))
        return [(s, out[id(s)]) for s in self.files]

    # -- attempts ------------------------------------------------------------------------------

    async def observe_ends(self) -> None:
        """No attempt runs: nothing is handed out (lines stay with the reader until the attempt's start
        places them), but reading starts, so that none is missed when the attempt starts."""
        self._ensure_reading()

    def _placed_text(self, s: Stream, at: int) -> str:
        return f"{s.path}: Loki lines from {at} ns on (the attempt's start)"


def books(config: Config) -> tuple[sources.BookFactory, LokiClient]:
    """A book factory for ``engine.Engine(log_books=...)`` and its shared client (close it at the end)."""
    client = LokiClient(config.url, auth=config.auth, timeout_s=config.timeout_s)

    def make(workload: str, job_id: str, clock: clock_mod.Clock, pool: fileio.FilePool | None) -> sources.LogBook:
        del pool  # no files
        return LokiBook(workload, job_id, clock, config, client)

    return make, client
