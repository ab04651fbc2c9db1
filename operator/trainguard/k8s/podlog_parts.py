"""The small parts of pod-log reading (``k8s/podlogs.py``): its settings, the line hash, a buffered
line and one container's follow stream. Apart so that the book's module holds the reading itself."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from trainguard.signals import linehash

HASH_CHARS = 16


@dataclass(frozen=True)
class Config:
    """How pod logs are read."""

    max_line: int = 64 * 1024
    """Bytes of a line kept (the rest is dropped and counted, as the file tailer does)."""
    max_buffer: int = 200_000
    """Lines held between two reads at most."""
    chunk: int = 64 * 1024
    """Bytes read from a stream at once."""
    retry_s: float = 0.5
    """First wait before a stream or the pod watch is opened again (doubling up to ``max_backoff_s``)."""
    max_backoff_s: float = 30.0
    max_connections: int = 20_000
    """Connections of the pod-log client to the apiserver at most. Each pod watch and each follow stream
    holds one for as long as it runs: with the library's 100, streams beyond ~50 one-pod workloads
    waited for a free one and timed out, and their crashes were never read (issue 28, goal 2)."""
    watch_timeout_s: int = 240
    """A pod watch is renewed after this long (the apiserver ends watches anyway)."""


def line_hash(pod: str, container: str, text: str) -> str:
    return linehash.digest(pod, container, text, chars=HASH_CHARS)


@dataclass(slots=True)
class Item:
    """One line waiting to be read: its CRI time, hash and text, and who printed it."""

    ns: int
    digest: str
    text: str
    node: str | None
    rank: int | None
    uid: str = ""
    """The pod that printed it (or whose ending it is)."""


@dataclass
class Follow:
    """One container's follow stream: the newest line read from it (for ``sinceTime`` on reconnect).

    Kept per pod NAME and container: a pod replaced under the same name (a PyTorchJob's) continues from
    the newest line of the one before, so a log its node serves again from the start is not read twice."""

    pod: str
    container: str
    uid: str = ""
    """The pod (uid) now followed under that name."""
    newest: int = 0
    at_newest: set[str] = field(default_factory=set)
    """Hashes of the lines read at exactly ``newest`` (a reconnect reads that second again)."""
    task: asyncio.Task[None] | None = None
