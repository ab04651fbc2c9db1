"""Where the current attempt's output starts in a file (signals.resume), over real temp files."""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

import pytest

from trainguard.signals import positions, resume

NOW = time.time()


def stamp_syslog(at: float) -> str:
    return time.strftime("%b %e %H:%M:%S", time.localtime(at))


def stamp_iso(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-01T13:20:00Z training", datetime.datetime(2026, 12, 1, 13, 20, tzinfo=datetime.UTC).timestamp()),
        ("0: [2026-12-01 13:20:00,500] INFO x",
         datetime.datetime(2026, 12, 1, 13, 20, 0, 500000).timestamp()),  # no zone: local time
        ("1: 2026-12-01T14:20:00+0100 y", datetime.datetime(2026, 12, 1, 13, 20, tzinfo=datetime.UTC).timestamp()),
        ("step 10/200 | loss 0.2435", None),
        ("", None),
    ],
)
def test_line_time_reads_iso_stamps(text: str, expected: float | None) -> None:
    assert resume.line_time(text, NOW) == expected


def test_line_time_reads_syslog_stamps_in_the_latest_matching_year() -> None:
    at = NOW - 3600
    got = resume.line_time(f"1: {stamp_syslog(at)} node2 kernel: NVRM: Xid 79", NOW)
    assert got is not None and abs(got - int(at)) < 1


def test_pending_start_is_the_current_end(tmp_path: Path) -> None:
    p = tmp_path / "job.out"
    assert resume.pending_start(str(p)).basis == "new_file"
    p.write_bytes(b"attempt 0 line\nXid\n")
    start = resume.pending_start(str(p))
    assert (start.basis, start.position.offset) == ("pending", p.stat().st_size)
    assert start.position.fingerprint == positions.fingerprint_of(p.read_bytes())


def test_running_start_skips_lines_stamped_before_the_start(tmp_path: Path) -> None:
    started = NOW - 60
    p = tmp_path / "job.out"
    old = f"1: {stamp_syslog(started - 20)} node2 kernel: Xid 79\n0: teardown without a stamp\n"
    new = f"0: {stamp_iso(started + 3)} attempt 1 banner\n0: step 1\n"
    p.write_text(old + new)
    start = resume.running_start(str(p), started_at=started, previous=None, previous_is_last=False, now=NOW)
    assert (start.basis, start.position.offset) == ("timestamps", len(old))
    assert (start.skipped, start.ambiguous) == (len(old), 1)
    assert start.position.lineno == 2


def test_running_start_with_only_old_stamps_and_unplaceable_lines_is_unknown(tmp_path: Path) -> None:
    started = NOW - 60
    p = tmp_path / "job.out"
    p.write_text(f"1: {stamp_syslog(started - 20)} node2 kernel: Xid 79\n0: no stamp here\n")
    start = resume.running_start(str(p), started_at=started, previous=None, previous_is_last=False, now=NOW)
    assert (start.basis, start.position.offset, start.ambiguous) == ("unknown", p.stat().st_size, 1)


def test_running_start_all_old_stamps_is_placed(tmp_path: Path) -> None:
    started = NOW - 60
    p = tmp_path / "job.out"
    p.write_text(f"{stamp_iso(started - 20)} a\n{stamp_iso(started - 10)} b\n")
    start = resume.running_start(str(p), started_at=started, previous=None, previous_is_last=False, now=NOW)
    assert (start.basis, start.position.offset, start.ambiguous) == ("timestamps", p.stat().st_size, 0)


def test_running_start_file_not_written_since_the_start_is_all_old(tmp_path: Path) -> None:
    p = tmp_path / "job.out"
    p.write_text("no stamps at all\n")
    os.utime(p, (NOW - 100, NOW - 100))
    start = resume.running_start(str(p), started_at=NOW - 50, previous=None, previous_is_last=False, now=NOW)
    assert (start.basis, start.position.offset) == ("mtime", p.stat().st_size)


def test_running_start_without_a_start_time_is_unknown(tmp_path: Path) -> None:
    p = tmp_path / "job.out"
    p.write_text("x\n")
    start = resume.running_start(str(p), started_at=None, previous=None, previous_is_last=False, now=NOW)
    assert (start.basis, start.position.offset, start.skipped) == ("unknown", 2, 2)


def test_running_start_continues_after_the_previous_attempts_position(tmp_path: Path) -> None:
    started = NOW - 60
    p = tmp_path / "job.out"
    p.write_text(f"{stamp_iso(started - 30)} attempt 0\n")
    t = positions.TailPosition(str(p), p.stat().st_ino, p.stat().st_size, 1, positions.fingerprint_of(p.read_bytes()))
    with p.open("a") as f:
        f.write(f"{stamp_iso(started + 2)} attempt 1\n")
    start = resume.running_start(str(p), started_at=started, previous=t, previous_is_last=True, now=NOW)
    assert (start.basis, start.position.offset, start.position.lineno, start.skipped) == ("timestamps", t.offset, 1, 0)


def test_running_start_after_a_truncation_by_the_next_attempt_reads_everything(tmp_path: Path) -> None:
    p = tmp_path / "job.out"
    p.write_text("attempt 0 output, quite a long line\n")
    t = positions.TailPosition(str(p), p.stat().st_ino, p.stat().st_size, 1, positions.fingerprint_of(p.read_bytes()))
    p.write_text("attempt 1 output, longer than the old one was\n")  # truncated, same inode
    start = resume.running_start(str(p), started_at=NOW, previous=t, previous_is_last=True, now=NOW)
    assert (start.basis, start.position.offset) == ("truncated", 0)
    # the saved position is of an older attempt: which attempt truncated it is not known
    older = resume.running_start(str(p), started_at=None, previous=t, previous_is_last=False, now=NOW)
    assert older.basis == "unknown"


def test_running_start_of_a_missing_file_is_a_new_file(tmp_path: Path) -> None:
    start = resume.running_start(str(tmp_path / "none.out"), started_at=NOW, previous=None, previous_is_last=False,
                                 now=NOW)
    assert (start.basis, start.position.offset) == ("new_file", 0)
