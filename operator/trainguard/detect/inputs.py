"""What a path given to the offline commands holds: text to analyse, nothing, binary data, or nothing readable.

Place: ``trainguard detect`` and ``trainguard scan`` open every input through ``open_input``
before reading lines. Without this, an empty file, a gzip-compressed log or a core dump passed by
mistake comes out as a clean ``healthy`` verdict (or zero matches), which is the worst answer a
failure detector can give: it looks like a verdict but nothing was looked at.

``sniff`` judges the first ``HEAD_BYTES`` only, so a multi-GB file costs one small read:

* ``empty``: no byte other than whitespace (the whole input fits in the head);
* ``binary``: the head starts with the magic number of a compressed archive or an executable, or
  is mostly not text (many NUL bytes, or mostly control bytes and invalid UTF-8). Log files with a
  stray NUL, colour escapes or a few garbled bytes are text; they stay ``ok``.

Standard input (``-``) is read through the same head, replayed to the reader afterwards.
"""

from __future__ import annotations

import enum
import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

HEAD_BYTES = 64 * 1024
"""Bytes judged per input: enough to see past a banner, small enough to cost nothing."""
NUL_SHARE = 0.10
"""Share of NUL bytes above which the head is binary (core dumps, checkpoints, sparse holes)."""
NON_TEXT_SHARE = 0.45
"""Share of control bytes and invalid UTF-8 above which the head is binary. Random or compressed
bytes score about 0.5; a log with garbled lines or terminal escapes scores far below."""

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip-compressed data"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data"),
    (b"\xfd7zXZ\x00", "xz-compressed data"),
    (b"BZh", "bzip2-compressed data"),
    (b"\x04\x22\x4d\x18", "lz4-compressed data"),
    (b"PK\x03\x04", "a zip archive (e.g. a PyTorch checkpoint)"),
    (b"7z\xbc\xaf\x27\x1c", "a 7z archive"),
    (b"\x7fELF", "an ELF executable or core dump"),
    (b"\x93NUMPY", "a NumPy array"),
)
_COMPRESSED = frozenset({"gzip-compressed data", "zstd-compressed data", "xz-compressed data",
                         "bzip2-compressed data", "lz4-compressed data"})
_CONTROL = bytes([c for c in range(32) if c not in (9, 10, 11, 12, 13, 27)] + [127])
"""Bytes that text never holds (tab, newlines, form feed and ESC are text: logs carry them)."""


class Kind(enum.StrEnum):
    """The ``input`` field of ``trainguard detect``/``scan`` JSON output."""

    OK = "ok"
    EMPTY = "empty"
    BINARY = "binary"
    UNREADABLE = "unreadable"


@dataclass(frozen=True)
class Sniffed:
    kind: Kind
    detail: str = ""
    """Why, for the one-line message on stderr (empty for ``ok``)."""
    skip: bool = False
    """True when reading the lines would be pointless (compressed data: every line is noise)."""


def sniff(head: bytes, *, complete: bool) -> Sniffed:
    """Judge an input from its first bytes; ``complete``: ``head`` is the whole input."""
    if complete and not head.strip():
        what = "empty input" if not head else "only whitespace"
        return Sniffed(Kind.EMPTY, f"{what}, nothing to analyse")
    for magic, what in _MAGIC:
        if head.startswith(magic) and (magic != b"BZh" or head[3:4].isdigit()):
            hint = "; decompress it first (e.g. zcat FILE | trainguard detect -)" if what in _COMPRESSED else ""
            return Sniffed(Kind.BINARY, f"binary input: {what}, not a text log{hint}", skip=what in _COMPRESSED)
    size = len(head)
    nul = head.count(0)
    if nul > NUL_SHARE * size:
        return Sniffed(Kind.BINARY, f"binary input: {nul * 100 // size}% of the first {size} bytes are NUL")
    control = size - len(head.translate(None, _CONTROL))
    invalid = head.decode("utf-8", errors="replace").count("\ufffd")
    if control + invalid > NON_TEXT_SHARE * size:
        share = (control + invalid) * 100 // size
        return Sniffed(Kind.BINARY, f"binary input: {share}% of the first {size} bytes are not text")
    return Sniffed(Kind.OK)


class _Replay(io.RawIOBase):
    """A stream that first returns ``head`` and then the rest of ``rest`` (for a pipe we cannot seek)."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head = memoryview(head)
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if len(self._head):
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


@contextmanager
def open_input(path: str, stdin: BinaryIO | None = None) -> Iterator[tuple[BinaryIO, Sniffed]]:
    """The input ``path`` (``-``: standard input) positioned at its start, and what it holds.

    Raises OSError (``IsADirectoryError`` for a directory) when it cannot be read; callers report
    that as ``unreadable``.
    """
    if path == "-":
        source = stdin if stdin is not None else sys.stdin.buffer
        head = source.read(HEAD_BYTES)
        yield io.BufferedReader(_Replay(head, source)), sniff(head, complete=len(head) < HEAD_BYTES)
        return
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(21, "is a directory", path)
    with target.open("rb") as handle:
        head = handle.read(HEAD_BYTES)
        sniffed = sniff(head, complete=len(head) < HEAD_BYTES)
        if handle.seekable():
            handle.seek(0)
            yield handle, sniffed
        else:  # a FIFO or a character device
            yield io.BufferedReader(_Replay(head, handle)), sniffed


def reason(exc: OSError) -> str:
    """The one-line reason of a read error (``No such file or directory``), without errno noise."""
    return exc.strerror or str(exc)
