"""The descriptor limit (``ulimit -n``) never caps how many output files are followed, and a file
that cannot be opened is reported, never silently left unread.

Each case runs in a child Python process with ``RLIMIT_NOFILE`` lowered, so the limit is real
(the kernel refuses the open) and the test process's own limit is untouched.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

CHILD_PRELUDE = """
import json, os, resource, sys
from pathlib import Path
from trainguard.model import clock
from trainguard.signals import tailer
"""


def run_child(body: str, tmp_path: Path) -> dict[str, object]:
    code = CHILD_PRELUDE + textwrap.dedent(body)
    done = subprocess.run(  # argv list: our own interpreter and a fixed program
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    result["stderr"] = done.stderr
    return result


def test_more_files_than_the_descriptor_limit_are_all_read(tmp_path: Path) -> None:
    """300 growing files under a limit of 64 descriptors: every line of every file is read, in
    order, over several polls, and the tailers keep at most half the limit open."""
    result = run_child(
        """
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        folder = Path(sys.argv[1])
        c = clock.ManualClock()
        paths = [folder / f"{i}.out" for i in range(300)]
        tailers = [tailer.LogTailer(str(p), c, workload=f"w{i}", source="stdout") for i, p in enumerate(paths)]
        got = [[] for _ in paths]
        for step in range(4):
            for i, p in enumerate(paths):
                with p.open("a") as handle:
                    handle.write(f"file {i} line {step}\\n")
            for i, t in enumerate(tailers):
                got[i] += [line.text for line in t.poll()]
        complete = sum(1 for i, lines in enumerate(got) if lines == [f"file {i} line {s}" for s in range(4)])
        print(json.dumps({"complete": complete, "held": tailer.DESCRIPTORS.held,
                          "unreadable": sum(1 for t in tailers if t.unreadable)}))
        """,
        tmp_path,
    )
    assert result["complete"] == 300
    assert result["unreadable"] == 0
    assert isinstance(result["held"], int) and 0 < result["held"] <= 32


def test_a_rotated_file_beyond_the_budget_is_read_from_the_new_start_with_a_marker(tmp_path: Path) -> None:
    """A tailer that closes its file between polls notices a replaced file by its inode and
    reads the new one from its start (the same marker as after a restart)."""
    result = run_child(
        """
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        folder = Path(sys.argv[1])
        c = clock.ManualClock()
        keep = [open(os.devnull) for _ in range(40)]  # more than half the limit is in use elsewhere
        tailer.DESCRIPTORS.held = 32  # and the budget is spent
        path = folder / "job.out"
        path.write_text("old 1\\n")
        t = tailer.LogTailer(str(path), c, workload="w", source="stdout")
        first = [line.text for line in t.poll()]
        os.rename(path, folder / "job.out.1")
        path.write_text("new 1\\nnew 2\\n")
        second = [line.text for line in t.poll()]
        print(json.dumps({"first": first, "second": second}))
        """,
        tmp_path,
    )
    assert result["first"] == ["old 1"]
    second = result["second"]
    assert isinstance(second, list)
    assert second[-2:] == ["new 1", "new 2"]
    assert any(tailer_marker in text for text in second[:-2] for tailer_marker in ("[trainguard]",))


def test_no_descriptor_left_is_reported_loudly_and_recovers(tmp_path: Path) -> None:
    """Every descriptor taken (by the process, not the tailers): the open fails, the tailer says
    why (``unreadable``) and logs an error naming the limit; once descriptors are free again it
    reads the file from where it was."""
    result = run_child(
        """
        import logging
        logging.basicConfig(level=logging.WARNING)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        folder = Path(sys.argv[1])
        path = folder / "job.out"
        path.write_text("line 1\\n")
        t = tailer.LogTailer(str(path), clock.ManualClock(), workload="w", source="stdout")
        hog = []
        try:
            while True:
                hog.append(open(os.devnull))
        except OSError:
            pass
        blocked = [line.text for line in t.poll()]
        why = t.unreadable
        for handle in hog:
            handle.close()
        again = [line.text for line in t.poll()]
        print(json.dumps({"blocked": blocked, "why": why, "again": again, "after": t.unreadable}))
        """,
        tmp_path,
    )
    assert result["why"] == f"cannot open {tmp_path / 'job.out'}: Too many open files"
    assert "line 1" not in result["blocked"]
    assert result["again"] == ["line 1"]
    assert result["after"] == ""
    assert "ulimit -n" in str(result["stderr"]) and "Too many open files" in str(result["stderr"])
