"""The tailing round's reads in batches (``fileio.run_many``, ``tailer.read_many``, ``tailbook.read_books``).

Real files in a temp folder and the real file pool; a slow or hung file system is stood in for by
wrapping ``LogTailer.poll`` (a delay, or a wait on an event that the test releases).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path

import pytest

from trainguard.model import clock, signals
from trainguard.signals import fileio, tailbook, tailer


def _books(tmp_path: Path, n_books: int, per_book: int, c: clock.Clock, pool: fileio.FilePool,
           timeout: float) -> list[tailbook.TailBook]:
    books = []
    for b in range(n_books):
        book = tailbook.TailBook(f"slurm/t/{b}", c, pool=pool, timeout=timeout)
        for k in range(per_book):
            p = tmp_path / f"job{b}-{k}.out"
            p.write_bytes(f"first line of {b}-{k}\n".encode())
            book.add(str(p), f"stdout{k}")
        books.append(book)
    return books


def _append(path: str, text: str) -> None:
    with open(path, "a") as h:
        h.write(text)


def _texts(batch: list[tuple[tailbook.Followed, list[signals.LogLine]]]) -> dict[str, list[str]]:
    return {f.path: [x.text for x in lines] for f, lines in batch}


async def test_a_long_round_is_not_mistaken_for_stuck_files(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Many files behind one busy thread: each read is timed from its own start, not from when the
    round queued it, so a round longer than the timeout reports nothing stuck and reads every file."""
    c = clock.ManualClock()
    pool = fileio.FilePool(workers=1)
    [book] = _books(tmp_path, 1, 40, c, pool, timeout=0.5)
    real_poll = tailer.LogTailer.poll

    def slow_poll(self: tailer.LogTailer) -> list[signals.LogLine]:
        time.sleep(0.05)  # a slow (not hung) file system: 40 reads take 2 s on the one thread
        return real_poll(self)

    monkeypatch.setattr(tailer.LogTailer, "poll", slow_poll)
    with caplog.at_level(logging.WARNING, logger="trainguard.signals.tailer"):
        got = _texts(await book.read())
    assert not [r for r in caplog.records if "is stuck" in r.getMessage()]
    assert all(len(lines) == 1 for lines in got.values()) and len(got) == 40
    assert not any(f.tailer.stuck for f in book.files)
    book.close()
    pool.close()


async def test_a_hung_file_holds_up_no_other_file_of_the_round(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A file on a hung mount: reported stuck once, never read twice at once, the other workloads'
    files read in every round meanwhile, and its lines delivered once its read returns."""
    c = clock.ManualClock()
    pool = fileio.FilePool(workers=2)
    books = _books(tmp_path, 3, 10, c, pool, timeout=0.2)
    hung = books[1].files[4].path
    release = threading.Event()
    hung_calls: list[int] = []
    real_poll = tailer.LogTailer.poll

    def poll(self: tailer.LogTailer) -> list[signals.LogLine]:
        if self.path == hung:
            hung_calls.append(1)
            release.wait(30)
        return real_poll(self)

    monkeypatch.setattr(tailer.LogTailer, "poll", poll)
    with caplog.at_level(logging.WARNING, logger="trainguard.signals.tailer"):
        for round_ in range(3):
            got: dict[str, list[str]] = {}
            for batch in await tailbook.read_books(books):
                got.update(_texts(batch))
            assert got.pop(hung) == []
            expected = "first line of" if round_ == 0 else f"round {round_}"
            assert all(len(lines) == 1 and lines[0].startswith(expected) for lines in got.values()), got
            for b in books:
                for f in b.files:
                    _append(f.path, f"round {round_ + 1}\n")
        assert len(hung_calls) == 1, "no second read of a file whose read is stuck"
        assert books[1].files[4].tailer.stuck
        release.set()
        late: list[str] = []
        for _ in range(3000):
            late = _texts((await tailbook.read_books([books[1]]))[0])[hung]
            if late:
                break
            await asyncio.sleep(0.01)
        assert late == ["first line of 1-4", "round 1", "round 2", "round 3"]  # nothing lost
    stuck = [r for r in caplog.records if "is stuck" in r.getMessage()]
    again = [r for r in caplog.records if "works again" in r.getMessage()]
    assert len(stuck) == 1 and hung in stuck[0].getMessage() and len(again) == 1
    for b in books:
        b.close()
    pool.close()


async def test_files_wait_for_the_next_round_while_every_thread_is_held(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pool thread held by a stuck read: the other files are not read this round (nor
    reported stuck), and the next round after the thread is free reads all they hold."""
    c = clock.ManualClock()
    pool = fileio.FilePool(workers=1)
    [book] = _books(tmp_path, 1, 2, c, pool, timeout=0.2)
    hung, other = book.files[0], book.files[1]
    release = threading.Event()
    real_poll = tailer.LogTailer.poll

    def poll(self: tailer.LogTailer) -> list[signals.LogLine]:
        if self.path == hung.path:
            release.wait(30)
        return real_poll(self)

    monkeypatch.setattr(tailer.LogTailer, "poll", poll)
    assert _texts(await book.read()) == {hung.path: [], other.path: []}
    assert hung.tailer.stuck and not other.tailer.stuck
    _append(other.path, "more\n")
    assert _texts(await book.read()) == {hung.path: [], other.path: []}
    release.set()
    got: dict[str, list[str]] = {}
    for _ in range(3000):
        for path, lines in _texts(await book.read()).items():
            got.setdefault(path, []).extend(lines)
        if got.get(other.path):
            break
        await asyncio.sleep(0.01)
    assert got[other.path] == ["first line of 0-1", "more"]
    book.close()
    pool.close()
