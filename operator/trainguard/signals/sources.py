"""The log-source seam: where the engine gets a tracked workload's output lines from.

Place: under ``signals/``, between the engine and the readers. The engine keeps one *book* per
tracked workload (``WorkloadRuntime.book``) and talks to it only through ``LogBook``:

- ``add(path, source, start)``: follow one output stream of the job (its ``StdOut``/``StdErr``
  path; for a log store the path is the value of the stream's file-name field);
- ``read()``: the new lines of every stream, each ``(entry, lines)``;
- ``consume(entry, line)``: the line was handed to detection; a restart resumes after it;
- ``observe_ends()`` / ``place_at_start(started_at)``: while no attempt runs nothing is read;
  when it runs, its lines start at its start;
- ``unsaved()`` / ``mark_saved()``: the positions to store (``store.audit.TailRecord`` rows);
- ``attempt_start(...)``: where the current attempt starts on first sight of the job (after a
  restart), for sources that do not read files (the file book leaves this to ``signals.resume``).

Implementations: ``tailbook.TailBook`` (output files on a shared file system, the default) and
``victorialogs.VictoriaLogsBook`` (a VictoriaLogs server, chosen when ``victorialogs_url`` is set).
A position is a ``positions.TailPosition`` for every source, so the existing tail-position table
stores them all; each source documents what its fields mean.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from trainguard.model import clock as clock_mod
from trainguard.model import evidence, signals
from trainguard.signals import fileio, resume, tailbook
from trainguard.signals.positions import TailPosition

FILES = "files"
"""``LogBook.kind`` of the file book: the engine finds attempt starts in the files themselves."""


class Followed(Protocol):
    """One followed output stream of a workload, as the engine sees it."""

    @property
    def path(self) -> str: ...

    source: str
    consumed: TailPosition | None
    basis: str


class LogBook(Protocol):
    """The followed output of one workload (see the module docstring)."""

    workload: str
    kind: str

    @property
    def files(self) -> Sequence[Any]: ...

    def add(self, path: str, source: str, start: resume.Start | None = None) -> Any: ...

    def close(self) -> None: ...

    async def run(self, call: Callable[[], resume.Start]) -> resume.Start | None: ...

    async def read(self) -> list[tuple[Any, list[signals.LogLine]]]: ...

    def consume(self, f: Any, line: signals.LogLine) -> None: ...

    async def observe_ends(self) -> None: ...

    def place_at_start(self, started_at: float | None) -> list[tuple[Any, str]]: ...

    def set_basis(self, basis: str) -> None: ...

    def attempt_replaced(self, at: float) -> None:
        """The scheduler's listing showed a new attempt at ``at`` (the engine's clock), its old one read
        out: a book whose lines carry their own times drops what it still receives from before ``at``
        from the processes it followed until then (the old attempt's late lines and endings: the old
        attempt was judged already). Files need nothing: their order is the byte order."""
        ...

    def unsaved(self) -> list[Any]: ...

    def mark_saved(self, files: list[Any]) -> None: ...

    def attempt_start(self, path: str, *, attempt: int, running: bool, started_at: float | None,
                      mine: Sequence[TailPosition], earlier: Sequence[TailPosition]) -> resume.Start | None:
        """Where attempt ``attempt`` starts in ``path`` on first sight of the job; ``mine``/``earlier``
        are the stored positions of this attempt and of earlier ones (oldest first). Only called when
        ``kind`` is not ``FILES``."""
        ...


class NodeSource(Protocol):
    """Node evidence beside the GPU metrics and the scheduler's node state (the engine's
    ``node_sources``), e.g. Kubernetes Node conditions and taints (``k8s/node_conditions.py``).

    ``window`` answers for the attempt's ``nodes`` over its window (``start`` may be None) and never
    raises for an outage: it returns its source as unavailable, with the reason."""

    name: str

    async def window(self, nodes: Sequence[str], start: float | None, now: float) -> evidence.NodeEvidence: ...


BookFactory = Callable[[str, str, clock_mod.Clock, fileio.FilePool | None], LogBook]
"""``factory(workload, job_id, clock, pool)``: a new, empty book for one workload."""


def file_books(workload: str, job_id: str, clock: clock_mod.Clock, pool: fileio.FilePool | None) -> LogBook:
    """The default: the job's output files, tailed on the engine's file pool."""
    del job_id  # files are found by path
    return tailbook.TailBook(workload, clock, pool=pool)
