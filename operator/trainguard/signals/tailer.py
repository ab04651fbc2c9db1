"""Follow one job output file (Slurm ``StdOut``/``StdErr``) and hand new lines to detection.

The engine polls ``LogTailer.read_new()`` every few hundred milliseconds per tracked job; the
resulting ``signals.LogLine`` objects feed ``detect/`` (crash patterns, hang = silence). A
poll is one ``stat`` plus a read of the bytes added since the last poll.

What a Slurm output file does to a reader, and what we do:
- not created yet (job pending): no lines, no error;
- requeue with ``--open-mode=append``: the file grows; we simply continue;
- requeue without it (Slurm truncates): size below our offset -> restart at 0, with a marker;
- rotation/replacement (inode changed, or file deleted): finish the old file, reopen the new
  one from 0, with a marker;
- a partial last line: kept until its newline arrives, or flushed after ``partial_timeout``;
- binary junk: decoded with ``errors="replace"`` (detection cleans further);
- huge lines: at most ``max_line`` bytes kept, the rest dropped and counted in a marker; a
  line is never held whole in memory.
``position()`` returns a small ``TailPosition`` the engine stores, so a restarted engine
resumes after the last line it handed out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import BinaryIO

from trainguard.model import clock as clock_mod
from trainguard.model import signals

MARKER = "[trainguard]"
"""Prefix of the lines the tailer itself inserts (truncation, rotation, dropped bytes)."""

DEFAULT_MAX_LINE = 64 * 1024
"""Bytes kept per line: long enough for any stack-trace line, short enough to bound memory."""

DEFAULT_MAX_READ = 4 * 1024 * 1024
"""Bytes read per poll at most; a backlog is worked off over several polls, each one bounded."""

_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class TailPosition:
    """Where a tailer stands: ``offset`` is just past the last line handed out."""

    path: str
    inode: int | None
    offset: int
    lineno: int


class LogTailer:
    """Incremental reader of one growing text file."""

    def __init__(
        self,
        path: str,
        clock: clock_mod.Clock,
        *,
        workload: str,
        source: str,
        position: TailPosition | None = None,
        max_line: int = DEFAULT_MAX_LINE,
        max_read: int = DEFAULT_MAX_READ,
        partial_timeout: float = 5.0,
    ) -> None:
        self.path = path
        self.workload = workload
        self.source = source
        self._clock = clock
        self._max_line = max_line
        self._max_read = max_read
        self._partial_timeout = partial_timeout
        self._fh: BinaryIO | None = None
        self._inode: int | None = None
        self._offset = 0  # read pointer
        self._committed = 0  # just past the last line handed out
        self._lineno = 0
        self._frag = bytearray()
        self._dropped = 0
        self._frag_since: float | None = None
        self._restore = position if position is not None and position.path == path else None
        if self._restore is not None:
            self._lineno = self._restore.lineno

    # ------------------------------------------------------------ public

    def position(self) -> TailPosition:
        return TailPosition(self.path, self._inode, self._committed, self._lineno)

    async def read_new(self) -> list[signals.LogLine]:
        """Lines completed since the last call (file I/O is small and local: done inline)."""
        out: list[signals.LogLine] = []
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            self._marker(out, f"cannot stat {self.path}: {exc.strerror}")
            return out
        if self._fh is not None:
            fst = os.fstat(self._fh.fileno())
            if st is None or st.st_ino != fst.st_ino:
                self._drain_old(out)
                if st is not None:
                    self._marker(out, "output file was replaced; reading the new file from its start")
            elif fst.st_size < self._offset:
                self._reset_to_start()
                self._marker(out, "output file was truncated; reading from its start")
        if self._fh is None and (st is None or not self._open(out)):
            return out
        self._read(out)
        self._flush_stale_fragment(out)
        return out

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    # ------------------------------------------------------------ internals

    def _open(self, out: list[signals.LogLine]) -> bool:
        try:
            self._fh = open(self.path, "rb")  # noqa: SIM115 - kept open across polls to survive rotation
        except OSError as exc:
            if not isinstance(exc, FileNotFoundError):
                self._marker(out, f"cannot open {self.path}: {exc.strerror}")
            return False
        fst = os.fstat(self._fh.fileno())
        self._inode = fst.st_ino
        start = 0
        restore, self._restore = self._restore, None
        if restore is not None:
            if restore.inode == fst.st_ino and restore.offset <= fst.st_size:
                start = restore.offset
            else:
                self._marker(out, "output file changed while we were stopped; reading from its start")
        self._offset = self._committed = start
        self._fh.seek(start)
        self._frag.clear()
        self._dropped = 0
        self._frag_since = None
        return True

    def _reset_to_start(self) -> None:
        assert self._fh is not None
        self._fh.seek(0)
        self._offset = self._committed = 0
        self._frag.clear()
        self._dropped = 0
        self._frag_since = None

    def _drain_old(self, out: list[signals.LogLine]) -> None:
        """The path now names another file (or none): read what is left of ours, then let go."""
        self._read(out)
        if self._frag or self._dropped:
            self._emit(out)
        self.close()
        self._inode = None

    def _read(self, out: list[signals.LogLine]) -> None:
        assert self._fh is not None
        budget = self._max_read
        while budget > 0:
            data = self._fh.read(min(_CHUNK, budget))
            if not data:
                break
            budget -= len(data)
            self._feed(data, out)

    def _feed(self, data: bytes, out: list[signals.LogLine]) -> None:
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                self._keep(data[start:])
                self._offset += len(data) - start
                return
            self._keep(data[start:nl])
            self._offset += nl + 1 - start
            self._emit(out)
            start = nl + 1

    def _keep(self, piece: bytes) -> None:
        if not piece:
            return
        if self._frag_since is None:
            self._frag_since = self._clock.now()
        room = self._max_line - len(self._frag)
        if room > 0:
            self._frag += piece[:room]
        self._dropped += max(0, len(piece) - max(room, 0))

    def _emit(self, out: list[signals.LogLine]) -> None:
        text = self._frag.decode("utf-8", errors="replace")
        if text.endswith("\r"):
            text = text[:-1]
        if self._dropped:
            text += f" {MARKER} {self._dropped} bytes of this line dropped"
        self._append(out, text)
        self._frag.clear()
        self._dropped = 0
        self._frag_since = None
        self._committed = self._offset

    def _flush_stale_fragment(self, out: list[signals.LogLine]) -> None:
        if self._frag_since is not None and self._clock.now() - self._frag_since >= self._partial_timeout:
            self._emit(out)

    def _marker(self, out: list[signals.LogLine], what: str) -> None:
        self._append(out, f"{MARKER} {what}")

    def _append(self, out: list[signals.LogLine], text: str) -> None:
        self._lineno += 1
        out.append(signals.LogLine(text=text, lineno=self._lineno, received_at=self._clock.now(), source=self.source))
