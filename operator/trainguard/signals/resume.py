"""Where the current attempt's output starts in a job's output file, after a restart or on first sight.

Place in the loop: under ``signals/``, used by the engine when it starts tracking a job (a new
process, or a job it has not seen before). ``tailer.LogTailer`` reads from a position; this
module decides which position, so that lines the previous attempt wrote are never charged to
the current one. Why it matters: with ``--open-mode=append`` (or ``JobFileAppend=1``) a
requeued job's file still holds the previous attempt's Xid line; read from byte 0 it would get
the healthy new attempt requeued and a healthy node excluded. A truncating file still holds the
old lines until the new attempt starts.

The answer, per file, best evidence first (``Start.basis``):

- ``stored``: the position saved for this very attempt (the engine saves one per tailing round
  and when an attempt starts running) -- resume exactly there;
- ``pending``: the job is not running (pending or requeued): whatever the file holds belongs to
  earlier attempts, so the next attempt starts at its current end;
- ``truncated``: we saved a position of the attempt just before, and the file no longer holds
  those bytes: it was truncated when the current attempt started, so all of it is the current
  attempt's;
- ``new_file``: no file yet -- everything that appears is the current attempt's;
- ``mtime``: the file was last written before the attempt started (scheduler ``StartTime``):
  all of it is older;
- ``timestamps``: lines carry timestamps (ISO 8601 or syslog): the attempt starts at the first
  line stamped at or after its start time; unstamped lines just before it cannot be told apart
  and are left out;
- ``unknown``: none of the above: the content that exists now is skipped (never charged to the
  current attempt) and only lines written from now on are read. The engine logs this and keeps
  the basis with the saved position, so the gap is on record.
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from trainguard.signals import positions

SCAN_LIMIT = 64 * 1024 * 1024
"""Bytes of an output file scanned for line timestamps at most: a training log of a few days
is far below; beyond it the boundary is reported unknown rather than holding a thread longer."""

_HEAD = 96
"""Characters at the start of a line searched for a timestamp (after srun/rank prefixes)."""

_PIECE = 64 * 1024
"""Bytes read per ``readline`` while scanning: a longer line is read in pieces, never whole."""

_ISO_RE = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<time>\d{2}:\d{2}:\d{2})(?P<frac>[.,]\d+)?(?P<tz>Z|[+-]\d{2}:?\d{2})?"
)
_SYSLOG_RE = re.compile(
    r"\b(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) {1,2}(?P<day>\d{1,2}) (?P<time>\d{2}:\d{2}:\d{2})\b"
)


@dataclass(frozen=True, slots=True)
class Start:
    """Where to read one file from for the current attempt, and why."""

    position: positions.TailPosition
    basis: str
    skipped: int = 0
    """Bytes before ``position`` (after the saved position of an earlier attempt, if any) that
    are not charged to the current attempt."""
    ambiguous: int = 0
    """How many of the skipped lines could belong to either attempt (no timestamp)."""

    def describe(self) -> str:
        text = f"from byte {self.position.offset} ({self.basis})"
        if self.skipped:
            text += f", {self.skipped} earlier bytes not charged to this attempt"
        if self.ambiguous:
            text += f" ({self.ambiguous} lines without a timestamp could not be placed)"
        return text


def line_time(text: str, now: float) -> float | None:
    """The timestamp a line starts with (epoch s), or None.

    ISO 8601 (``2026-12-01T13:20:00.5Z``, ``2026-12-01 13:20:00,123``) and syslog
    (``Dec  1 13:20:00``, no year: the latest such time not after ``now`` + 1 day). Times
    without a zone are local time, like the kernel's and most loggers' output.
    """
    head = text[:_HEAD]
    if (m := _ISO_RE.search(head)) is not None:
        frac = (m["frac"] or "").replace(",", ".")
        tz = m["tz"] or ""
        if tz and tz != "Z" and ":" not in tz:
            tz = f"{tz[:3]}:{tz[3:]}"
        try:
            when = datetime.datetime.fromisoformat(f"{m['date']}T{m['time']}{frac[:7]}{'+00:00' if tz == 'Z' else tz}")
        except ValueError:
            return None
        return when.timestamp()
    if (m := _SYSLOG_RE.search(head)) is not None:
        year = datetime.datetime.fromtimestamp(now).year
        for y in (year, year - 1):
            try:
                when = datetime.datetime.strptime(f"{y} {m['mon']} {int(m['day'])} {m['time']}", "%Y %b %d %H:%M:%S")
            except ValueError:
                continue
            if when.timestamp() <= now + 86400:
                return when.timestamp()
        return None
    return None


def pending_start(path: str) -> Start:
    """The job is not running: its next attempt starts where the file ends now (blocking I/O)."""
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            end = positions.TailPosition(path, st.st_ino, st.st_size, 0, positions.read_fingerprint(fh, st.st_size))
            return Start(end, "pending")
    except FileNotFoundError:
        return Start(positions.TailPosition(path, None, 0, 0), "new_file")


def running_start(path: str, *, started_at: float | None, previous: positions.TailPosition | None,
                  previous_is_last: bool, now: float) -> Start:
    """The current attempt ran (running or finished) and we have no position saved for it (blocking I/O).

    ``previous`` is the position saved for an earlier attempt (lines before it are old for
    sure); ``previous_is_last`` says that attempt was the one just before the current one.
    """
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below on every path
    except FileNotFoundError:
        return Start(positions.TailPosition(path, None, 0, 0), "new_file")
    try:
        st = os.fstat(fh.fileno())
        scan_from, lineno = 0, 0
        if previous is not None:
            fingerprint = previous.fingerprint
            same_bytes = not fingerprint or positions.read_fingerprint(fh, previous.offset) == fingerprint
            kept = previous.inode in (None, st.st_ino) and previous.offset <= st.st_size and same_bytes
            if kept:
                scan_from, lineno = previous.offset, previous.lineno
            elif previous_is_last:
                # Only the start of an attempt truncates the file, and we saved a position of the
                # attempt just before after it had started: the current attempt truncated it.
                return Start(positions.TailPosition(path, st.st_ino, 0, 0), "truncated")

        def at(offset: int, lines: int) -> positions.TailPosition:
            return positions.TailPosition(path, st.st_ino, offset, lines, positions.read_fingerprint(fh, offset))

        if scan_from >= st.st_size:
            return Start(at(st.st_size, lineno), "mtime" if started_at is not None else "unknown")
        if started_at is not None and st.st_mtime < started_at:
            return Start(at(st.st_size, lineno), "mtime", skipped=st.st_size - scan_from)
        if started_at is None or st.st_size - scan_from > SCAN_LIMIT:
            return Start(at(st.st_size, lineno), "unknown", skipped=st.st_size - scan_from)
        return _scan(fh, at, size=st.st_size, offset=scan_from, lineno=lineno, started_at=started_at, now=now)
    finally:
        fh.close()


def _scan(fh: BinaryIO, at: Callable[[int, int], positions.TailPosition], *, size: int, offset: int, lineno: int,
          started_at: float, now: float) -> Start:
    """Find the first line stamped at or after ``started_at`` between ``offset`` and ``size``."""
    fh.seek(offset)
    scan_from = line_start = last_old_end = offset
    unplaced = 0  # complete lines since the last old-stamped one that no timestamp places
    first_piece = True
    stamp: float | None = None
    while offset < size:
        piece = fh.readline(min(size - offset, _PIECE))
        if not piece:
            break
        if first_piece:
            stamp = line_time(piece[: _HEAD * 4].decode("utf-8", errors="replace"), now)
            # Second-granularity stamps: a line stamped in the start's own second could be either.
            if stamp is not None and stamp >= started_at + 1:
                return Start(at(line_start, lineno), "timestamps", skipped=line_start - scan_from, ambiguous=unplaced)
        offset += len(piece)
        if not piece.endswith(b"\n"):
            first_piece = False  # a long line goes on (or a partial last line)
            continue
        first_piece = True
        lineno += 1
        if stamp is not None and stamp < started_at:
            last_old_end, unplaced = offset, 0
        else:
            unplaced += 1
        line_start = offset
    basis = "timestamps" if unplaced == 0 and last_old_end == line_start else "unknown"
    return Start(at(line_start, lineno), basis, skipped=line_start - scan_from, ambiguous=unplaced)
