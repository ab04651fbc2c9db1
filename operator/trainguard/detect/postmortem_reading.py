"""How ``detect.static`` hands lines to ``postmortem.Collector``, the same way on both of its reading paths.

Place: ``static.FileAnalyzer.analyze`` calls ``block`` once per block of whole lines;
``analyze_by_line`` (the reference it is held equal to) calls ``line`` per line. Both offer the
collector the same lines with the same numbers: every line ``postmortem.TRIGGER`` finds, every
line while a per-rank table is open, and the last lines of the file for its tail. The block path
finds trigger lines with one Hyperscan scan of the block (``postmortem.TRIGGER_EXPRESSIONS``; the
same expressions as Python's ``postmortem.TRIGGER``, which the line path and a machine without
Hyperscan use) and counts newlines only up to each hit, so a block without a hit costs one scan
and the tail's few lines. (Python's ``re`` scans such an alternation at a few MB/s.)
"""

from __future__ import annotations

import functools
from typing import Any

from trainguard.detect import matcher, postmortem, sanitize
from trainguard.detect.reading import Block, cut_line


@functools.cache
def _database() -> Any | None:
    """The trigger expressions as one Hyperscan database (once per process), or None without Hyperscan."""
    try:
        import hyperscan
    except ImportError:
        return None
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    expressions = list(postmortem.TRIGGER_EXPRESSIONS)
    ids = list(range(len(expressions)))
    flag = hyperscan.HS_FLAG_CASELESS | hyperscan.HS_FLAG_MULTILINE
    database.compile(expressions=expressions, ids=ids, elements=len(ids), flags=[flag] * len(ids))
    return database


def line(collector: postmortem.Collector, lineno: int, raw: bytes, text: str) -> None:
    """One line of ``analyze_by_line``: ``raw`` as read, ``text`` cleaned (may be empty)."""
    if text and (collector.open or postmortem.TRIGGER.search(raw) is not None):
        collector.feed(lineno, text)
    if text:
        collector.line(lineno, text)


def block(collector: postmortem.Collector, chunk: Block, first_line: int) -> None:
    """One block of ``analyze`` whose first line is number ``first_line``."""
    if chunk.overlong:
        line(collector, first_line, chunk.data, sanitize.clean_line(chunk.data))
        return
    data = chunk.data
    size = len(data)
    database = _database()
    starts = sorted(matcher.line_starts(database, data)) if database is not None else None
    pos = 0  # start of the next line to look at
    lineno = first_line
    hits = iter(starts or ())
    while pos < size:
        if not collector.open:
            if starts is not None:
                start = next((s for s in hits if s >= pos), None)
            else:
                found = postmortem.TRIGGER.search(data, pos)
                start = None if found is None else data.rfind(b"\n", pos, found.start()) + 1 or pos
            if start is None:
                break
            lineno += data.count(b"\n", pos, start)
            pos = start
        end = data.find(b"\n", pos)
        end = size if end < 0 else end
        text = _clean(data[pos:end], newline=end < size)
        if text and (collector.open or starts is not None or postmortem.TRIGGER.search(data, pos, end) is not None):
            collector.feed(lineno, text)
        pos, lineno = end + 1, lineno + 1
    _tail(collector, data, first_line)


def _tail(collector: postmortem.Collector, data: bytes, first_line: int) -> None:
    """The block's last ``TAIL_LINES`` lines, in order, with their numbers."""
    body = data[:-1] if data.endswith(b"\n") else data
    parts = body.rsplit(b"\n", postmortem.TAIL_LINES)
    last = first_line + body.count(b"\n")
    # parts[0] may be the rest of the block (longer than one line): drop it unless the block is that short.
    kept = parts if len(parts) <= postmortem.TAIL_LINES else parts[1:]
    for offset, raw in enumerate(kept):
        text = _clean(raw, newline=True)
        if text:
            collector.line(last - len(kept) + 1 + offset, text)


def _clean(raw: bytes, *, newline: bool) -> str:
    return sanitize.clean_line(cut_line(raw, newline=newline))
