"""Reading a log file as bytes in bounded memory: whole-line blocks (``read_blocks``) or lines (``read_lines``).

Place: ``detect.static`` reads every file through these (split from it to keep each module small).
A multi-GB file or a 10 MB line never sits in memory whole: a line longer than the limit keeps
its head and tail, joined by `` ... ``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

MAX_LINE_BYTES = 1024 * 1024
"""Longest raw line read whole; longer lines keep their head and tail (the cleaner caps them again)."""
BLOCK_BYTES = 4 * 1024 * 1024
"""Bytes read at once by ``static.FileAnalyzer.analyze``: large enough that the block scan's call
overhead vanishes, small enough that memory stays flat (a block, its lines and the matcher's hits)."""


@dataclass(frozen=True, slots=True)
class Block:
    """Whole lines of a file as read by ``read_blocks``.

    ``data`` holds complete lines separated by newlines (the last one may lack its newline at
    the end of the file), or, when ``overlong``, one line already cut to head + tail exactly as
    ``read_lines`` cuts it. ``consumed``: bytes of the file this block stands for.
    """

    data: bytes
    consumed: int
    overlong: bool = False

    def lines(self) -> list[bytes]:
        if self.overlong:
            return [self.data]
        parts = self.data.split(b"\n")
        if not parts[-1]:
            parts.pop()  # the newline that ends the block, not an empty line
        return parts


def read_blocks(
    handle: BinaryIO, block_bytes: int = BLOCK_BYTES, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[Block]:
    """The file as blocks of whole lines, about ``block_bytes`` each, in bounded memory.

    A line still without its newline after more than ``max(block_bytes, max_line_bytes)``
    bytes is read on to its end keeping only its head and tail (``_overlong``), so a multi-GB
    line never sits in memory. Shorter over-long lines stay in the block; ``cut_line`` cuts them.
    """
    limit = max(block_bytes, max_line_bytes)
    pending = b""
    while True:
        data = handle.read(block_bytes)
        if not data:
            if pending:
                yield Block(pending, len(pending))
            return
        pending += data
        cut = pending.rfind(b"\n")
        if cut < 0:
            if len(pending) > limit:
                block, pending = _overlong(pending, handle, max_line_bytes)
                yield block
            continue
        yield Block(pending[: cut + 1], cut + 1)
        pending = pending[cut + 1 :]


def cut_line(raw: bytes, *, newline: bool, max_line_bytes: int = MAX_LINE_BYTES) -> bytes:
    """A line (its newline excluded) as ``read_lines`` yields it: head + `` ... `` + tail when over-long."""
    if len(raw) < max_line_bytes:
        return raw
    return raw[:max_line_bytes] + b" ... " + (raw[max_line_bytes:] + (b"\n" if newline else b""))[-max_line_bytes:]


def _overlong(head: bytes, handle: BinaryIO, max_line_bytes: int) -> tuple[Block, bytes]:
    """An over-long line starting ``head`` (no newline yet): read to its end keeping only its last bytes.

    Returns the line, already cut as ``read_lines`` cuts it, and what was read after its newline.
    """
    consumed = len(head)
    tail = head[max_line_bytes:][-max_line_bytes:]
    while True:
        more = handle.read(max_line_bytes)
        if not more:
            return Block(head[:max_line_bytes] + b" ... " + tail, consumed, overlong=True), b""
        newline = more.find(b"\n")
        if newline >= 0:
            tail = (tail + more[: newline + 1])[-max_line_bytes:]
            consumed += newline + 1
            return Block(head[:max_line_bytes] + b" ... " + tail, consumed, overlong=True), more[newline + 1 :]
        tail = (tail + more)[-max_line_bytes:]
        consumed += len(more)


def read_lines(handle: BinaryIO, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """Raw lines of a binary stream, each at most ~``max_line_bytes`` (head + tail of longer ones)."""
    while True:
        chunk = handle.readline(max_line_bytes)
        if not chunk:
            return
        if chunk.endswith(b"\n") or len(chunk) < max_line_bytes:
            yield chunk
            continue
        tail = b""
        while True:  # an over-long line: skip its middle, keep the last block read
            more = handle.readline(max_line_bytes)
            if not more:
                break
            tail = (tail + more)[-max_line_bytes:]
            if more.endswith(b"\n"):
                break
        yield chunk + b" ... " + tail
