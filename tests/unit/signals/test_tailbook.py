"""TailBook: consumed positions, and the start of an attempt first seen waiting (real temp files)."""

from __future__ import annotations

from pathlib import Path

from trainguard.model import clock
from trainguard.signals import tailbook


async def test_an_attempt_starts_at_the_last_end_seen_before_its_start_time(tmp_path: Path) -> None:
    c = clock.ManualClock(1000.0)
    p = tmp_path / "job.out"
    p.write_bytes(b"attempt 0 Xid\n")
    book = tailbook.TailBook("w", c)
    f = book.add(str(p), "stdout")
    await book.observe_ends()
    with p.open("ab") as h:
        h.write(b"attempt 0 teardown\n")  # still the old attempt: written before the start
    c.advance(1)
    await book.observe_ends()
    boundary = p.stat().st_size
    c.advance(1)
    with p.open("ab") as h:
        h.write(b"attempt 1 banner\n")  # the new attempt started at 1001.5 (Slurm says 1001)
    await book.observe_ends()  # seen at 1002: after the start, so not the boundary
    [(placed, _how)] = book.place_at_start(1002.0)
    assert placed is f and f.consumed is not None and f.consumed.offset == boundary and f.basis == "pending"
    assert [x.text for _f, lines in await book.read() for x in lines] == ["attempt 1 banner"]
    book.close()


async def test_unsaved_lists_only_moved_positions(tmp_path: Path) -> None:
    c = clock.ManualClock()
    p = tmp_path / "job.out"
    p.write_bytes(b"a\nb\n")
    book = tailbook.TailBook("w", c)
    f = book.add(str(p), "stdout")
    [(_, lines)] = await book.read()
    for line in lines:
        book.consume(f, line)
    assert book.unsaved() == [f]
    book.mark_saved([f])
    assert book.unsaved() == []
    book.close()
