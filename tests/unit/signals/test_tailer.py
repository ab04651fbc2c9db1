"""LogTailer over real temp files: append, truncate, rotate, partial lines, junk, huge lines."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path

import pytest

from trainguard.model import clock, signals
from trainguard.signals import fileio, positions, tailer


def make(path: Path, c: clock.ManualClock, **kw: object) -> tailer.LogTailer:
    return tailer.LogTailer(str(path), c, workload="slurm/t/1", source="stdout", **kw)  # type: ignore[arg-type]


def texts(lines: list[signals.LogLine]) -> list[str]:
    return [x.text for x in lines]


async def test_missing_file_then_appends(tmp_path: Path) -> None:
    c = clock.ManualClock()
    p = tmp_path / "job.out"
    t = make(p, c)
    assert await t.read_new() == []
    p.write_bytes(b"iteration 1\niteration 2\n")
    c.advance(1)
    got = await t.read_new()
    assert texts(got) == ["iteration 1", "iteration 2"]
    assert [x.lineno for x in got] == [1, 2] and got[0].received_at == c.now() and got[0].source == "stdout"
    assert await t.read_new() == []
    with p.open("ab") as f:  # a requeued job with --open-mode=append
        f.write(b"iteration 1 (attempt 2)\r\n")
    got = await t.read_new()
    assert texts(got) == ["iteration 1 (attempt 2)"] and got[0].lineno == 3
    t.close()


async def test_partial_line_kept_then_flushed_after_timeout(tmp_path: Path) -> None:
    c = clock.ManualClock()
    p = tmp_path / "job.out"
    p.write_bytes(b"a\nhalf")
    t = make(p, c, partial_timeout=5.0)
    assert texts(await t.read_new()) == ["a"]
    with p.open("ab") as f:
        f.write(b" line\nnext")
    assert texts(await t.read_new()) == ["half line"]
    c.advance(6)
    assert texts(await t.read_new()) == ["next"]
    assert t.position().offset == p.stat().st_size
    t.close()


async def test_truncation_restarts_with_marker(tmp_path: Path) -> None:
    c = clock.ManualClock()
    p = tmp_path / "job.out"
    p.write_bytes(b"one\ntwo\nthree\n")
    t = make(p, c)
    await t.read_new()
    p.write_bytes(b"new\n")  # Slurm truncates the output on requeue without --open-mode=append
    got = texts(await t.read_new())
    assert got[0].startswith(tailer.MARKER) and "truncated" in got[0]
    assert got[1:] == ["new"]
    t.close()


async def test_rotation_finishes_old_file_then_reads_new(tmp_path: Path) -> None:
    c = clock.ManualClock()
    p = tmp_path / "job.out"
    p.write_bytes(b"old 1\n")
    t = make(p, c)
    assert texts(await t.read_new()) == ["old 1"]
    with p.open("ab") as f:
        f.write(b"old 2\nold tail")
    os.rename(p, tmp_path / "job.out.1")
    p.write_bytes(b"fresh\n")
    got = texts(await t.read_new())
    assert got[:2] == ["old 2", "old tail"]
    assert got[2].startswith(tailer.MARKER) and "replaced" in got[2]
    assert got[3:] == ["fresh"]
    t.close()


async def test_a_file_replaced_between_path_checks_is_read_to_its_end_then_left(tmp_path: Path) -> None:
    """A poll of an open file costs one fstat; its path is looked up again every PATH_CHECK_S. A
    file replaced in between is read on (its writer's last lines) until the next check, which
    moves to the new file with the marker: no line of either is lost."""
    c = clock.ManualClock()
    p = tmp_path / "job.out"
    p.write_bytes(b"old 1\n")
    t = make(p, c)
    assert texts(await t.read_new()) == ["old 1"]
    assert await t.read_new() == []  # this poll looked the path up
    os.rename(p, tmp_path / "job.out.1")
    p.write_bytes(b"fresh\n")
    with (tmp_path / "job.out.1").open("ab") as f:
        f.write(b"old 2\n")  # the writer still holds the old file
    assert texts(await t.read_new()) == ["old 2"]
    c.advance(tailer.PATH_CHECK_S)
    got = texts(await t.read_new())
    assert got[0].startswith(tailer.MARKER) and "replaced" in got[0]
    assert got[1:] == ["fresh"]
    t.close()


async def test_deleted_file_then_recreated(tmp_path: Path) -> None:
    c = clock.ManualClock()
    p = tmp_path / "job.out"
    p.write_bytes(b"x\n")
    t = make(p, c)
    await t.read_new()
    p.unlink()
    assert await t.read_new() == []
    p.write_bytes(b"y\n")
    assert texts(await t.read_new()) == ["y"]
    t.close()


async def test_binary_junk_and_huge_lines(tmp_path: Path) -> None:
    c = clock.ManualClock()
    p = tmp_path / "job.out"
    huge = b"E" * 300_000
    p.write_bytes(b"\xff\xfe\x00ok\n" + huge + b"\nafter\n")
    t = make(p, c, max_line=1000)
    got = texts(await t.read_new())
    assert got[0] == "\ufffd\ufffd\x00ok"
    assert got[1].startswith("E" * 1000) and got[1].endswith(f"{tailer.MARKER} 299000 bytes of this line dropped")
    assert len(got[1]) < 1100
    assert got[2] == "after"
    t.close()


async def test_reads_are_bounded_per_poll(tmp_path: Path) -> None:
    c = clock.ManualClock()
    p = tmp_path / "job.out"
    p.write_bytes(b"".join(b"line %d\n" % i for i in range(20_000)))
    t = make(p, c, max_read=64 * 1024)
    first = await t.read_new()
    assert 0 < len(first) < 20_000
    rest = []
    while batch := await t.read_new():
        rest.extend(batch)
    assert len(first) + len(rest) == 20_000 and rest[-1].text == "line 19999"
    t.close()


async def test_position_restores_after_restart(tmp_path: Path) -> None:
    c = clock.ManualClock()
    p = tmp_path / "job.out"
    p.write_bytes(b"a\nb\npart")
    t = make(p, c)
    assert texts(await t.read_new()) == ["a", "b"]
    pos = t.position()
    t.close()
    with p.open("ab") as f:
        f.write(b"ial\nc\n")
    t2 = make(p, c, position=pos)
    got = await t2.read_new()
    assert texts(got) == ["partial", "c"] and got[0].lineno == 3
    t2.close()
    other = positions.TailPosition(str(p), pos.inode, 10**9, 7)  # offset past the end: file changed meanwhile
    t3 = make(p, c, position=other)
    fresh = texts(await t3.read_new())
    assert "changed while we were stopped" in fresh[0] and fresh[1:] == ["a", "b", "partial", "c"]
    t3.close()


async def test_position_carries_a_fingerprint_that_catches_a_rewrite_while_stopped(tmp_path: Path) -> None:
    """Truncated and rewritten past our offset while we were stopped: same inode, size >= offset."""
    c = clock.ManualClock()
    p = tmp_path / "job.out"
    p.write_bytes(b"old attempt line 1\nold attempt Xid\n")
    t = make(p, c)
    assert len(await t.read_new()) == 2
    pos = t.position()
    assert pos.fingerprint == positions.fingerprint_of(p.read_bytes()[-positions.FINGERPRINT_BYTES:])
    t.close()
    with p.open("r+b") as f:  # Slurm truncates for the next attempt, which prints more than before
        f.truncate(0)
        f.write(b"new attempt banner, a longer line than before\nnew 2\n")
    assert p.stat().st_size >= pos.offset
    t2 = make(p, c, position=pos)
    got = texts(await t2.read_new())
    assert "changed while we were stopped" in got[0]
    assert got[1:] == ["new attempt banner, a longer line than before", "new 2"]
    t2.close()


async def test_truncation_and_rewrite_between_two_polls_is_noticed(tmp_path: Path) -> None:
    c = clock.ManualClock()
    p = tmp_path / "job.out"
    p.write_bytes(b"a\nb\n")
    t = make(p, c)
    assert texts(await t.read_new()) == ["a", "b"]
    with p.open("r+b") as f:  # same inode, and already longer than what we had read
        f.truncate(0)
        f.write(b"x\ny\nz\n")
    got = texts(await t.read_new())
    assert "truncated" in got[0] and got[1:] == ["x", "y", "z"]
    t.close()


async def test_position_after_each_line_of_a_batch(tmp_path: Path) -> None:
    """A decision half-way through a batch stores the position after the line it came from."""
    c = clock.ManualClock()
    p = tmp_path / "job.out"
    p.write_bytes(b"one\ntwo\nthree\n")
    t = make(p, c)
    got = await t.read_new()
    middle = t.position_after(got[1].lineno)
    assert (middle.offset, middle.lineno) == (8, 2)
    assert middle.fingerprint == positions.fingerprint_of(b"one\ntwo\n")
    t.close()
    t2 = make(p, c, position=middle)
    assert texts(await t2.read_new()) == ["three"]
    t2.close()


async def test_a_stuck_read_is_reported_once_and_never_doubled(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A hung NFS read: the round goes on without it, no second read starts, its lines arrive later."""
    c = clock.ManualClock()
    p = tmp_path / "job.out"
    p.write_bytes(b"before the hang\n")
    pool = fileio.FilePool(workers=2)
    t = make(p, c, pool=pool, timeout=0.05)
    release = threading.Event()
    calls = []
    real_poll = t.poll

    def hanging_poll() -> list[signals.LogLine]:
        calls.append(1)
        release.wait(30)
        return real_poll()

    monkeypatch.setattr(t, "poll", hanging_poll)
    with caplog.at_level(logging.WARNING, logger="trainguard.signals.tailer"):
        assert await t.read_new() == []
        assert t.stuck
        for _ in range(5):
            assert await t.read_new() == []
        assert len(calls) == 1, "no second read of a file whose read is stuck"
        release.set()
        for _ in range(3000):
            if not t.stuck:
                break
            await asyncio.sleep(0.01)
        assert texts(await t.read_new()) == ["before the hang"]  # the late read's lines are not lost
    stuck = [r for r in caplog.records if "is stuck" in r.getMessage()]
    again = [r for r in caplog.records if "works again" in r.getMessage()]
    assert len(stuck) == 1 and len(again) == 1
    t.close()
    pool.close()
