"""A small log shipper for tests: job output files -> VictoriaLogs ``/insert/jsonline``.

It does what a production shipper (Vector's ``file`` source + ``elasticsearch``/``http`` sink,
Fluent Bit's ``tail`` input) does, and nothing else: follow files by polling, cut them into
lines, stamp each line with the time it was read, and push batches as JSON lines with
``Content-Type: application/stream+json`` (without it the server answers 200 and stores
nothing) and the stream fields ``job_id``, ``host``, ``filename``. A line longer than
``max_line`` bytes is cut there (the rest dropped, as Vector's ``max_line_bytes`` does);
invalid UTF-8 is replaced. A failed push is retried with the same batch (at-least-once, like
the real ones; the reader de-duplicates).

``files`` is a callable returning the (path, fields) pairs to ship now, so a test can add the
output files of jobs as they appear (e.g. from ``scontrol show job``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp

STREAM_FIELDS = "job_id,host,filename"


@dataclass
class _Followed:
    path: str
    fields: dict[str, str]
    offset: int = 0
    inode: int | None = None
    partial: bytearray = field(default_factory=bytearray)


def now_rfc3339() -> str:
    ns = datetime.datetime.now(datetime.UTC)
    return ns.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


class Shipper:
    """Poll files every ``interval`` s and push their new lines (see the module docstring)."""

    def __init__(self, url: str, files: Callable[[], Sequence[tuple[str, dict[str, str]]]], *,
                 interval: float = 0.1, max_line: int = 64 * 1024, from_start: bool = True) -> None:
        self.url = url.rstrip("/")
        self._files = files
        self.interval = interval
        self.max_line = max_line
        self.from_start = from_start
        self.host = socket.gethostname()
        self.shipped = 0
        self._followed: dict[str, _Followed] = {}
        self._task: asyncio.Task[None] | None = None
        self._retry: list[bytes] = []

    async def __aenter__(self) -> Shipper:
        self._session = aiohttp.ClientSession()
        self._task = asyncio.ensure_future(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._session.close()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                await self.ship_once()
            await asyncio.sleep(self.interval)

    def _lines(self) -> list[bytes]:
        out: list[bytes] = []
        for path, fields in self._files():
            f = self._followed.get(path)
            if f is None:
                f = self._followed[path] = _Followed(path, {"filename": path, "host": self.host, **fields})
                if not self.from_start:
                    with contextlib.suppress(OSError):
                        f.offset = os.stat(path).st_size
            try:
                st = os.stat(path)
            except OSError:
                continue
            if f.inode is not None and (st.st_ino != f.inode or st.st_size < f.offset):
                f.offset, f.partial = 0, bytearray()  # replaced or truncated: read the new file
            f.inode = st.st_ino
            if st.st_size <= f.offset:
                continue
            with open(path, "rb") as fh:
                fh.seek(f.offset)
                data = fh.read(4 * 1024 * 1024)
            f.offset += len(data)
            start = 0
            while (nl := data.find(b"\n", start)) >= 0:
                if len(f.partial) < self.max_line:
                    f.partial += data[start:nl][: self.max_line - len(f.partial)]
                out.append(self._row(f, bytes(f.partial)))
                f.partial.clear()
                start = nl + 1
            if len(f.partial) < self.max_line:
                f.partial += data[start:][: self.max_line - len(f.partial)]
        return out

    def _row(self, f: _Followed, raw: bytes) -> bytes:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        self.shipped += 1
        return json.dumps({"ts": now_rfc3339(), "log": text, **f.fields}).encode()

    async def ship_once(self) -> None:
        """One poll of every file, pushed in one request (a failed push is retried next time)."""
        rows = self._retry or self._lines()
        self._retry = rows
        if not rows:
            return
        url = (f"{self.url}/insert/jsonline?_stream_fields={STREAM_FIELDS}&_msg_field=log&_time_field=ts")
        async with self._session.post(url, data=b"\n".join(rows) + b"\n",
                                      headers={"Content-Type": "application/stream+json"},
                                      timeout=aiohttp.ClientTimeout(total=10)) as resp:
            resp.raise_for_status()
        self._retry = []
