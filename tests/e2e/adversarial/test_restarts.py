"""Restarts of ``trainguard run`` at every step of a hardware recovery, on the real local Slurm cluster.

Each case runs one real training job whose rank 1 prints a kernel Xid line and dies on its first
attempt, watched by its own ``trainguard run --mode action``. That runner is killed with
``kill -9`` at one moment of the recovery, and a new runner is started on the same audit
database:

- ``failure``: just after the advice was recorded, before (or while) the requeue is carried out;
- ``pending``: after the requeue, while the job waits to run again (the test sets its begin
  time ahead, as a busy cluster would keep it pending, until the new runner has looked at it);
- ``running``: while the new, healthy attempt runs.

Each with the output file appended to across attempts (``--open-mode=append``, the common
setting on clusters that requeue) and truncated at each start (Slurm's default). Every case must
end with exactly one requeue, the node that had the Xid excluded and no other: the previous
attempt's Xid line must never be charged to the healthy attempt.

All six cases run concurrently (module fixture, one thread each); every wait is bounded.
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness
from tests.support.slurm import SlurmCluster, expand_hostlist

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

MOMENTS = ("failure", "pending", "running")
OPEN_MODES = ("append", "truncate")
STEPS = 300
"""Steps per attempt: 30 s at 0.1 s a step; 90 s at 0.3 s in the ``running`` cases, long enough
to restart the runner while the healthy attempt runs, even on a busy machine."""
CASE_TIMEOUT = 480.0
"""Submit -> final state of one case, with six jobs and twelve runners sharing two cores."""
RUNNER_START_TIMEOUT = 180.0
"""A runner's start (imports, migrations, compiling the catalog) while six others start too."""
REQUEUE_WITHOUT_BAD_NODE = ["requeue_hold", "exclude_nodes", "release"]


@dataclasses.dataclass
class Case:
    """One restart scenario and what it left behind."""

    moment: str
    open_mode: str
    job_id: str = ""
    bad_node: str = ""
    final: dict[str, str] = dataclasses.field(default_factory=dict)
    records: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    killed_code: int | None = None
    error: str = ""
    runners: list[harness.Trainguard] = dataclasses.field(default_factory=list)
    workdir: Path | None = None

    @property
    def name(self) -> str:
        return f"{self.moment}-{self.open_mode}"

    def why(self) -> str:
        parts = [f"case {self.name}, job {self.job_id}, bad node {self.bad_node!r}: {self.error}"]
        for i, runner in enumerate(self.runners):
            parts.append(f"--- runner {i + 1} log (end) ---\n" + "\n".join(runner.log().splitlines()[-25:]))
        for r in self.records:
            parts.append(f"audit: {r['kind']} #{r['attempt']} {str(r['payload'])[:200]}")
        if self.workdir is not None and self.job_id:
            parts.append("--- job output (end) ---\n"
                         + "\n".join(harness.output(self.workdir, self.job_id).splitlines()[-15:]))
        return "\n".join(parts)


def db_count(runner: harness.Trainguard, job_id: str, kind: str, *, min_attempt: int = 0) -> int:
    """Audit records of one kind for the job, read from the runner's SQLite file (its contract)."""
    path = runner.db_url.removeprefix("sqlite:///")
    if not Path(path).exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            row = db.execute("SELECT count(*) FROM audit_log WHERE kind = ? AND workload LIKE ? AND attempt >= ?",
                             (kind, f"%/{job_id}", min_attempt)).fetchone()
    except sqlite3.OperationalError:
        return 0  # not created yet
    return int(row[0])


def wait_until(what: str, check: Any, timeout: float, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise AssertionError(f"no {what} within {timeout:.0f} s")
        time.sleep(interval)


def bad_node(workdir: Path, job_id: str) -> str:
    """Where rank 1 of attempt 0 ran (its start banner), or "" before it printed it."""
    found = [m["node"] for m in harness.BANNER_RE.finditer(harness.output(workdir, job_id))
             if m["attempt"] == "0" and m["rank"] == "1"]
    return found[0] if found else ""


def second_runner(cluster: SlurmCluster, first: harness.Trainguard, policy: Path) -> harness.Trainguard:
    """A new ``trainguard run`` on the same audit database (its own log file)."""
    runner = harness.Trainguard(cluster, first.log_path.parent, mode="action", policy=policy)
    runner.log_path = first.log_path.with_name("trainguard-run-restarted.log")
    return runner


def drive(case: Case, cluster: SlurmCluster, base: Path) -> None:
    """The whole scenario; any failure is kept in ``case.error`` for the test to report."""
    directory = base / f"trainguard-{case.name}"
    directory.mkdir(parents=True, exist_ok=True)
    policy, policy_name = harness.isolated_policy(directory, spec=harness.NO_LEMONS)
    first = harness.Trainguard(cluster, directory, mode="action", policy=policy)
    case.runners.append(first)
    first.start(RUNNER_START_TIMEOUT)
    case.workdir = base / "jobs"
    # The healthy attempt must outlast the restarted runner's start (a minute when the machine is busy).
    step_time = 0.3 if case.moment == "running" else 0.1
    case.job_id = job_id = harness.submit(
        cluster, case.workdir, job_name=f"restart-{case.name}", nodes=2, steps=STEPS, step_time=step_time,
        log_every=5,
        ckpt_every=1000, fault="xid", fault_rank=1, fault_step=15, comment=f"trainguard policy={policy_name}",
        open_mode=case.open_mode,
    )

    # The node of rank 1 in attempt 0 (a truncating file loses this line when attempt 1 starts).
    wait_until("attempt 0 banner of rank 1", lambda: bool(bad_node(case.workdir, job_id)), timeout=CASE_TIMEOUT,
               interval=0.1)
    case.bad_node = bad_node(case.workdir, job_id)
    requeued_at = 0.0
    if case.moment == "pending":
        # Keep the requeued job pending (as a busy cluster would) until the new runner has looked
        # at it: a begin time in the future, set as soon as the requeue shows. Not a hold: holds
        # are part of the recovery itself.
        harness.wait_job(cluster, job_id, lambda j: int(j.get("Restarts", "0")) >= 1, timeout=CASE_TIMEOUT,
                         what="requeued", runner=first, workdir=case.workdir, interval=0.1)
        requeued_at = time.monotonic()
        cluster.scontrol("update", f"JobId={job_id}", "StartTime=now+3600")
    if case.moment == "failure":
        wait_until("advice", lambda: db_count(first, job_id, "advice") > 0, timeout=CASE_TIMEOUT)
    else:
        wait_until("outcome", lambda: db_count(first, job_id, "outcome") > 0, timeout=CASE_TIMEOUT)
        if case.moment == "running":
            harness.wait_job(cluster, job_id, harness.running_again(1), timeout=120, what="running again",
                             runner=first, workdir=case.workdir)
            wait_until("attempt 1 output", lambda: any(
                m["attempt"] == "1" for m in harness.BANNER_RE.finditer(harness.output(case.workdir, job_id))),
                timeout=120, interval=0.2)
    if case.moment == "pending":
        # The old attempt's tasks may still be ending (COMPLETING) when the outcome is recorded;
        # on a busy machine for several seconds. The begin time keeps the job pending afterwards.
        harness.wait_job(cluster, job_id, lambda j: j.get("JobState") == "PENDING", timeout=120,
                         what="pending after the requeue", runner=first, workdir=case.workdir, interval=0.2)
    first.process.kill()  # type: ignore[union-attr]  # kill -9
    case.killed_code = first.process.wait(timeout=30)  # type: ignore[union-attr]
    if case.moment == "pending":
        job = cluster.show(job_id)
        if job.get("JobState") != "PENDING":
            raise AssertionError(f"precondition: the requeued job is pending, got {harness.summary(job)}")

    second = second_runner(cluster, first, policy)
    case.runners.append(second)
    second.start(RUNNER_START_TIMEOUT)
    if case.moment == "running":
        seen = re.compile(rf"tracking \S+/{job_id} \(job {job_id}, attempt 1, (\w+)")
        wait_until("tracking by the new runner", lambda: bool(seen.search(second.log())), timeout=120, interval=0.2)
        match = seen.search(second.log())
        if match is None or match[1] != "RUNNING":
            raise AssertionError(f"precondition: attempt 1 still runs when the new runner starts: {match}")
    if case.moment == "pending":
        looked = re.compile(rf"/{job_id} attempt 1 has not started")
        wait_until("look at the pending job", lambda: bool(looked.search(second.log()))
                   or db_count(second, job_id, "anomaly", min_attempt=1) > 0, timeout=120, interval=0.2)
        # Bringing a requeued job's start forward within seconds of the requeue makes Slurm kill
        # it ("Job credential revoked"); 20 s after it is safe.
        wait_until("a safe moment to let the job start", lambda: time.monotonic() >= requeued_at + 20,
                   timeout=30, interval=0.5)
        cluster.scontrol("update", f"JobId={job_id}", "StartTime=now")

    case.final = harness.wait_job(cluster, job_id, harness.final_and_restarted(1), timeout=CASE_TIMEOUT,
                                  what="final after a requeue", runner=second, workdir=case.workdir)
    case.records = second.audit(job_id, timeout=RUNNER_START_TIMEOUT)  # a CLI start, on a busy machine


@pytest.fixture(scope="module")
def cases(slurm_cluster: SlurmCluster, e2e_dir: Path) -> Iterator[dict[str, Case]]:
    all_cases = {c.name: c for c in (Case(m, o) for m in MOMENTS for o in OPEN_MODES)}

    def run(case: Case) -> None:
        try:
            drive(case, slurm_cluster, e2e_dir)
        except BaseException as exc:  # reported by the case's test
            case.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"

    threads = [threading.Thread(target=run, args=(c,), name=c.name, daemon=True) for c in all_cases.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=CASE_TIMEOUT * 2.5)
    try:
        yield all_cases
    finally:
        for case in all_cases.values():
            for runner in case.runners:
                runner.stop()
            if case.job_id:
                harness.cancel_if_active(slurm_cluster, case.job_id)


@pytest.mark.parametrize("open_mode", OPEN_MODES)
@pytest.mark.parametrize("moment", MOMENTS)
def test_a_restart_ends_with_exactly_one_requeue_without_the_bad_node(
    cases: dict[str, Case], moment: str, open_mode: str
) -> None:
    case = cases[f"{moment}-{open_mode}"]
    assert not case.error, case.why()
    assert case.killed_code == -9, case.why()
    job = case.final
    assert (job["JobState"], job["Restarts"], job["ExitCode"]) == ("COMPLETED", "1", "0:0"), case.why()
    assert case.bad_node, case.why()
    assert expand_hostlist(job["ExcNodeList"]) == [case.bad_node], case.why()
    assert case.bad_node not in expand_hostlist(job["NodeList"])

    advice = harness.of_kind(case.records, "advice")
    assert [(a["attempt"], a["payload"]["action"], a["payload"]["exclusions"]) for a in advice] == [
        (0, "requeue", [case.bad_node])], case.why()
    done = [r["payload"].get("operation", "") for r in harness.of_kind(case.records, "action")
            if r["payload"]["status"] == "done"]
    assert done == REQUEUE_WITHOUT_BAD_NODE, case.why()
    assert not [r for r in case.records if r["kind"] in ("anomaly", "action") and r["attempt"] >= 1], (
        "the healthy attempt was charged: " + case.why())
