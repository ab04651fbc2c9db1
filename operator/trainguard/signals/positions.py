"""Where a reader of an output stream stands: the position the engine stores, and its fingerprint.

Place: under ``signals/``, shared by the file tailer (``signals.tailer``), which fills these in,
and the log-store books (``signals.storebook``, ``k8s.podlogs``), which reuse the same shape;
the audit store keeps them as tail-position rows so a restarted engine resumes after the last
line it handed out.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import BinaryIO

FINGERPRINT_BYTES = 128
"""Bytes before an offset that identify it: long enough to span more than one typical log
line (a rewritten file matching them by chance is then very unlikely), one small read."""

@dataclass(frozen=True, slots=True)
class TailPosition:
    """Where a tailer stands: ``offset`` is just past the last line handed out.

    ``fingerprint`` is ``fingerprint_of`` the ``min(offset, FINGERPRINT_BYTES)`` bytes before
    ``offset`` ("" when unknown: then only inode and size are checked on restore).

    The same shape holds a log store's position (``signals.storebook``, ``k8s.podlogs``), where
    the fields mean other things: ``offset`` is a time in nanoseconds, ``inode`` a count of lines
    and ``fingerprint`` their hashes. The names stay those of the file case and of the stored
    columns (``tables.TailPositionRow``).
    """

    path: str
    inode: int | None
    """A file: its inode (None: not known, not checked on restore). A log store: how many lines
    with exactly the time ``offset`` were handed out (a line count, not an inode)."""
    offset: int
    """A file: the byte offset just past the last line handed out. A log store: the time (ns) of
    the newest line handed out."""
    lineno: int
    fingerprint: str = ""


Mark = tuple[int | None, int, int, bytes]
"""A position not yet hashed: (inode, offset, lineno, the bytes before offset)."""


def fingerprint_of(data: bytes) -> str:
    """The stored form of the bytes before an offset."""
    return hashlib.sha256(data).hexdigest()[:32]


def read_fingerprint(fh: BinaryIO, offset: int) -> str:
    """Fingerprint of the bytes before ``offset`` in an open file ("" if they cannot be read)."""
    n = min(offset, FINGERPRINT_BYTES)
    try:
        data = os.pread(fh.fileno(), n, offset - n)
    except OSError:
        return ""
    return fingerprint_of(data) if len(data) == n else ""
