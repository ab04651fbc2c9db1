"""A job owner's hostile regexes cannot stall detection for everyone, on the real local Slurm cluster.

A job's opt-in comment may set ``checkpoint-regex`` and ``progress-regex``, and the same owner
decides what the job prints. Here the comment sets ``(a|a)*ckpt`` (Python ``re`` doubles its work
per ``a``) and five ``[0-9]*`` in a row (a polynomial of degree five), and the job prints, every
fraction of a second, lines on which Python ``re`` would run for longer than the universe is old.
The runner reads every job's lines on one event loop: with Python ``re`` the first such line froze
it, and another job's Xid was never detected. User regexes now run on RE2 (``model.user_regex``),
so the comment is accepted (no opt-in error), its checkpoint regex still finds the job's
checkpoint line, and the other job's Xid is advised as quickly as on a quiet cluster.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import harness
from tests.e2e.conftest import StartTrainguard
from tests.support.slurm import SlurmCluster
from tests.workloads import jobs

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

CHECKPOINT_REGEX = "(a|a)*ckpt"
PROGRESS_REGEX = "[0-9]*[0-9]*[0-9]*[0-9]*[0-9]*x"
HOSTILE_LINES = ("a" * 64 + "!", "1" * 5000 + "!")
"""Lines on which Python ``re`` would search the regexes above for ages (2^64 and ~5000^5 paths)."""
MARKER = "saved ckpt 1"
"""The hostile job's one real checkpoint line, printed after its first hostile lines."""

ADVICE_BOUND = 60.0
"""Most seconds from the Xid line in the job output to the advice on record. A quiet runner takes a
few (1 s poll, 1 s settle); a frozen one never gets there."""
TIMEOUT = 240.0

HOSTILE_JOB = """\
import os, sys, time
lines, marker, stop = {lines!r}, {marker!r}, {stop!r}
deadline = time.monotonic() + 600
for line in lines:
    print(line, flush=True)
print(marker, flush=True)
while time.monotonic() < deadline and not os.path.exists(stop):
    for line in lines:
        print(line, flush=True)
    time.sleep(0.3)
"""


def _submit_hostile(cluster: SlurmCluster, workdir: Path, policy: str) -> str:
    """A one-node job whose comment sets the hostile regexes and which prints hostile lines until
    ``workdir/stop`` exists (or ten minutes pass)."""
    workdir.mkdir(parents=True, exist_ok=True)
    program = workdir / "hostile.py"
    program.write_text(HOSTILE_JOB.format(lines=HOSTILE_LINES, marker=MARKER, stop=str(workdir / "stop")))
    comment = f"trainguard policy={policy} checkpoint-regex={CHECKPOINT_REGEX} progress-regex={PROGRESS_REGEX}"
    script = "\n".join([
        "#!/bin/bash",
        "#SBATCH --job-name=hostile-regex",
        f'#SBATCH --comment="{comment}"',
        "#SBATCH --nodes=1",
        f"#SBATCH --output={workdir / 'slurm-%j.out'}",
        f"exec {sys.executable} -u {program}",
        "",
    ])
    return cluster.submit(script)


def _workload_row(database: Path, job_id: str) -> tuple[str, list[str], bool] | None:
    """(comment, opt-in errors, checkpoint saved in any attempt) of the job, from the audit database."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        row = db.execute("SELECT id, comment, opt_in_errors FROM workloads WHERE job_id = ?", (job_id,)).fetchone()
        if row is None:
            return None
        saved = db.execute("SELECT COUNT(*) FROM attempts WHERE workload = ? AND checkpoint_saved", (row[0],))
        return row[1], json.loads(row[2]), saved.fetchone()[0] > 0


def _wait_checkpoint(database: Path, job_id: str, runner: harness.Trainguard) -> tuple[str, list[str], bool]:
    deadline = time.monotonic() + TIMEOUT
    while True:
        row = _workload_row(database, job_id) if database.exists() else None
        if row is not None and row[2]:
            return row
        if time.monotonic() >= deadline:
            raise AssertionError(f"job {job_id}: no checkpoint on record within {TIMEOUT:.0f} s; row {row}\n"
                                 + "\n".join(runner.log().splitlines()[-30:]))
        time.sleep(0.5)


@pytest.fixture(scope="module")
def scene(slurm_cluster: SlurmCluster, start_trainguard: StartTrainguard,
          e2e_dir: Path) -> Iterator[tuple[harness.Trainguard, Path, str, str]]:
    runner, policy = start_trainguard("monitor", "hostile-regex")
    workdir = e2e_dir / "jobs"
    hostile = _submit_hostile(slurm_cluster, workdir, policy)
    try:
        yield runner, workdir, hostile, policy
    finally:
        (workdir / "stop").touch()
        harness.cancel_if_active(slurm_cluster, hostile)


def test_a_hostile_comment_regex_is_run_linear_and_another_jobs_xid_is_still_advised_in_time(
    slurm_cluster: SlurmCluster, scene: tuple[harness.Trainguard, Path, str, str],
) -> None:
    runner, workdir, hostile, policy = scene
    database = Path(runner.db_url.removeprefix("sqlite:///"))
    # The hostile lines come before the checkpoint line: once it is on record, the runner read them.
    comment, errors, _ = _wait_checkpoint(database, hostile, runner)
    assert f"checkpoint-regex={CHECKPOINT_REGEX}" in comment
    assert errors == [], f"the comment's regexes were refused: {errors}"  # accepted: RE2 runs them in linear time
    printed_before = harness.output(workdir, hostile).count(HOSTILE_LINES[1])
    assert printed_before >= 1, "the job printed no hostile line"

    xid_seen: list[float] = []
    job_id = harness.submit(slurm_cluster, workdir, job_name="hostile-neighbour", nodes=2, steps=100,
                            step_time=0.1, log_every=5, fault="xid", fault_rank=1, fault_step=15,
                            comment=f"trainguard policy={policy}")
    watcher = threading.Thread(
        target=lambda: xid_seen.append(harness.first_line_at(
            jobs.output_path(workdir, job_id), re.compile(r"NVRM: Xid"), timeout=TIMEOUT) or -1.0),
        name="xid-watch", daemon=True)
    watcher.start()
    try:
        records = harness.wait_audit(runner, job_id, lambda rs: bool(harness.of_kind(rs, "advice", 0)),
                                     timeout=TIMEOUT, what="advice on the Xid while a hostile job prints")
    finally:
        harness.cancel_if_active(slurm_cluster, job_id)
    watcher.join(timeout=TIMEOUT)
    assert xid_seen and xid_seen[0] > 0, "the Xid job printed no Xid line: the scenario proves nothing"
    advice = harness.of_kind(records, "advice", 0)[0]
    took = harness.parse_time(advice["time"]) - xid_seen[0]
    assert took <= ADVICE_BOUND, f"advice {took:.1f} s after the Xid line: detection was held up"
    anomalies = [r["payload"] for r in harness.of_kind(records, "anomaly", 0)]
    assert any("xid" in json.dumps(payload).lower() for payload in anomalies), anomalies
    # All along, the hostile job kept printing its hostile lines, and the runner kept going.
    assert slurm_cluster.show(hostile).get("JobState") == "RUNNING", "the hostile job ended: the scenario is void"
    assert harness.output(workdir, hostile).count(HOSTILE_LINES[1]) > printed_before
    assert runner.alive(), runner.log()
