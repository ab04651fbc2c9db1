"""End-to-end harness: the real ``trainguard run`` process against the real local Slurm cluster.

Place: test support for ``tests/e2e/`` and ``benchmarks/recovery_latency.py``, outside the product.
It drives the product only through its outside contracts: the ``trainguard run`` and
``trainguard audit --format json`` commands, the audit database file, and Slurm's own commands
(``sbatch``, ``scontrol``, ``scancel``), so what passes here is what a user gets.

- ``Trainguard``: one runner subprocess with its own SQLite audit database and log file, started
  and stopped (SIGTERM, then SIGKILL after a timeout); ``audit()`` reads the trail back.
- ``isolated_policy``: an Action-mode RecoveryPolicy under a name unique to this session. Our jobs
  select it with ``policy=NAME`` in their comment; other people's jobs on the same cluster (which
  say just ``trainguard``) find no policy and are recorded but never acted on.
- ``submit``: sbatch without ``SLURM_JWT`` in the environment (``srun`` inside a 22.05 job fails
  with it) and with the job remembered so the session cancels it if it is left behind.
- ``wait_job``: bounded polling of ``scontrol`` with a diagnosis (runner log, audit, job output)
  when the wait times out.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.slurm import SlurmCluster
from tests.workloads import jobs

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAINGUARD = Path(sys.executable).with_name("trainguard")
"""The console script of the virtualenv running the tests (``.venv/bin/trainguard``)."""

READY_TEXT = "trainguard run: scheduler"
"""The runner's start-up log line, written once the store is open and the engine is about to loop."""
HTTP_RE = re.compile(r"HTTP endpoints on (?P<url>http://\S+) ")
"""The runner's log line naming the address it serves /healthz, /readyz and /metrics on."""
START_TIMEOUT = 60.0
STOP_TIMEOUT = 40.0
"""SIGTERM -> exit: the engine waits up to 30 s for in-flight recoveries, so a bit more than that."""
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "CONFIGURING", "COMPLETING", "SUSPENDED"})
FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})

BANNER_RE = re.compile(
    r"^(?P<task>\d+): \[rank(?P<rank>\d+)\]: rank (?P=rank) on node (?P<node>\S+) pid (?P<pid>\d+)"
    r" attempt (?P<attempt>\d+) \(world (?P<world>\d+), job (?P<job>\d+)\)$",
    re.MULTILINE,
)
"""Each rank's start banner (train.py), with the srun label."""

JobPredicate = Callable[[dict[str, str]], bool]


def parse_time(text: str) -> float:
    """An audit ``time`` (UTC ISO 8601) as epoch seconds."""
    return datetime.datetime.fromisoformat(text).timestamp()


def isolated_policy(directory: Path, *, mode: str = "Action", spec: str = "") -> tuple[Path, str]:
    """Write a RecoveryPolicy named uniquely for this session; returns (file, name).

    It has no selector, so routing never gives it to a job that names no policy (a policy without a
    selector is reached only by its name): jobs of other tests stay out of its Action mode.

    ``spec`` is extra YAML under ``spec:``, indented two spaces (see ``NO_LEMONS``).
    """
    name = f"e2e-{secrets.token_hex(4)}"
    path = directory / f"{name}.yaml"
    path.write_text(
        "apiVersion: trainguard.dev/v1alpha1\n"
        "kind: RecoveryPolicy\n"
        f"metadata:\n  name: {name}\n"
        f"spec:\n  mode: {mode}\n{spec}"
    )
    return path, name


NO_LEMONS = "  exclusion:\n    lemonNodeThreshold: 1000\n"
"""Policy YAML that keeps lemon-node memory out of the way: the scenarios of one session keep
failing rank 1, often on the same node, and lemon memory would then (rightly) exclude that node
from unrelated recoveries, making a scenario's expected exclusions depend on the others' timing."""


class Trainguard:
    """One ``trainguard run`` subprocess with its own audit database and log file."""

    def __init__(self, cluster: SlurmCluster, directory: Path, *, mode: str, policy: Path | None = None,
                 poll: float = 1.0, http_listen: str = "127.0.0.1:0", env: dict[str, str] | None = None,
                 db_url: str | None = None) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.cluster = cluster
        self.db_url = db_url or f"sqlite:///{directory / 'audit.db'}"
        self.log_path = directory / "trainguard-run.log"
        self.argv = [str(TRAINGUARD), "run", "--scheduler", "slurm-local", "--mode", mode, "--db", self.db_url,
                     "--poll", str(poll), "--http-listen", http_listen]
        # http_listen: a free port by default, so that runners of parallel tests never collide on
        # the contract's default 127.0.0.1:8080; the bound address is read back from the log.
        self.env = env if env is not None else cluster.env
        if policy is not None:
            self.argv += ["--policy", str(policy)]
        self.process: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None

    def start(self, timeout: float = START_TIMEOUT) -> Trainguard:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, cwd=REPO_ROOT)
        deadline = time.monotonic() + timeout
        while READY_TEXT not in self.log():
            if self.process.poll() is not None:
                raise AssertionError(f"trainguard run exited with {self.process.returncode} at start:\n{self.log()}")
            if time.monotonic() >= deadline:
                self.stop()
                raise AssertionError(f"trainguard run not ready after {timeout:.0f} s:\n{self.log()}")
            time.sleep(0.2)
        return self

    def stop(self) -> int:
        """SIGTERM, then SIGKILL after ``STOP_TIMEOUT``; returns the exit code (negative: killed)."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.returncode = self.process.returncode
        return self.returncode

    @property
    def http_url(self) -> str:
        """Base URL of the runner's /healthz, /readyz and /metrics (from its start-up log)."""
        match = HTTP_RE.search(self.log())
        if match is None:
            raise AssertionError(f"the runner logged no HTTP address:\n{self.log()}")
        return match["url"]

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def audit(self, job_id: str | None = None, *, timeout: float = 60.0) -> list[dict[str, Any]]:
        """``trainguard audit --format json``, oldest first; only ``job_id``'s records if given."""
        proc = subprocess.run([str(TRAINGUARD), "audit", "--db", self.db_url, "--format", "json"],
                              env=self.cluster.env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if proc.returncode != 0:
            raise AssertionError(f"trainguard audit exited with {proc.returncode}: {proc.stderr.strip()}")
        records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        if job_id is None:
            return records
        return [r for r in records if str(r.get("workload", "")).rsplit("/", 1)[-1] == job_id]


def submit(cluster: SlurmCluster, workdir: Path, **settings: Any) -> str:
    """Submit ``jobs.training_job_script(**settings)`` from ``workdir``; returns the job id."""
    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / f"job-{secrets.token_hex(6)}.sh"
    script.write_text(jobs.training_job_script(workdir=workdir, **settings))
    env = {k: v for k, v in cluster.env.items() if k != "SLURM_JWT"}
    proc = subprocess.run(["sbatch", "--parsable", f"--chdir={workdir}", str(script)], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, check=False)
    job_id = proc.stdout.strip().split(";", 1)[0]
    if proc.returncode != 0 or not job_id.isdigit():
        raise AssertionError(f"sbatch failed ({proc.returncode}): {proc.stderr.strip()} {proc.stdout.strip()}")
    cluster.submitted.append(job_id)
    return job_id


def cancel_if_active(cluster: SlurmCluster, job_id: str) -> None:
    """Cancel the job if it is still queued or running (a job slurmctld already purged is fine)."""
    try:
        if cluster.show(job_id).get("JobState") in ACTIVE_STATES:
            cluster.cancel(job_id)
    except AssertionError:
        pass


def summary(job: dict[str, str]) -> dict[str, str]:
    """The fields the tests check, for messages and reports."""
    keys = ("JobState", "Reason", "Restarts", "ExitCode", "NodeList", "ExcNodeList", "Comment")
    return {k: job.get(k, "?") for k in keys}


def output(workdir: Path, job_id: str) -> str:
    path = jobs.output_path(workdir, job_id)
    return path.read_text(errors="replace") if path.exists() else ""


def diagnosis(runner: Trainguard | None, workdir: Path, job_id: str) -> str:
    """Everything needed to see why a scenario went wrong, in one message."""
    parts = []
    if runner is not None:
        parts.append("--- trainguard run log (end) ---\n" + "\n".join(runner.log().splitlines()[-30:]))
        try:
            for record in runner.audit(job_id):
                parts.append(f"audit: {record['time']} {record['kind']} #{record['attempt']} "
                             f"{json.dumps(record['payload'], sort_keys=True)[:300]}")
        except AssertionError as exc:
            parts.append(f"audit unreadable: {exc}")
    parts.append(f"--- job {job_id} output (end) ---\n" + "\n".join(output(workdir, job_id).splitlines()[-25:]))
    return "\n".join(parts)


def wait_job(cluster: SlurmCluster, job_id: str, predicate: JobPredicate, *, timeout: float, what: str,
             runner: Trainguard | None = None, workdir: Path | None = None, interval: float = 0.5) -> dict[str, str]:
    """Poll ``scontrol show job`` until ``predicate`` holds; fail with a diagnosis after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        job = cluster.show(job_id)
        if predicate(job):
            return job
        if time.monotonic() >= deadline:
            detail = diagnosis(runner, workdir, job_id) if workdir is not None else ""
            raise AssertionError(f"job {job_id}: not {what} within {timeout:.0f} s; last seen {summary(job)}\n{detail}")
        time.sleep(interval)


def wait_audit(runner: Trainguard, job_id: str, predicate: Callable[[list[dict[str, Any]]], bool], *,
               timeout: float, what: str) -> list[dict[str, Any]]:
    """Poll the audit trail of ``job_id`` until ``predicate`` holds on it."""
    deadline = time.monotonic() + timeout
    while True:
        records = runner.audit(job_id)
        if predicate(records):
            return records
        if time.monotonic() >= deadline:
            kinds = [(r["kind"], r["attempt"]) for r in records]
            raise AssertionError(f"job {job_id}: no {what} in the audit within {timeout:.0f} s; have {kinds}\n"
                                 + "\n".join(runner.log().splitlines()[-30:]))
        time.sleep(0.5)


def xid_job_until(cluster: SlurmCluster, runner: Trainguard, workdir: Path, *, job_name: str, policy: str,
                  kind: str, timeout: float) -> tuple[str, list[dict[str, Any]]]:
    """A two-node job of ``policy`` whose rank 1 fails with an Xid at step 15, run until it is final and the
    audit trail holds a ``kind`` record of attempt 0: its job id and audit records (the job is cancelled
    if anything fails on the way). The Monitor-mode scenarios that check what follows one crash start so."""
    job_id = submit(cluster, workdir, job_name=job_name, nodes=2, steps=100, step_time=0.1, log_every=5,
                    fault="xid", fault_rank=1, fault_step=15, comment=f"trainguard policy={policy}")
    try:
        wait_job(cluster, job_id, is_final, timeout=timeout, what="final", runner=runner, workdir=workdir)
        records = wait_audit(runner, job_id, lambda rs: bool(of_kind(rs, kind, 0)), timeout=60, what=kind)
    finally:
        cancel_if_active(cluster, job_id)
    return job_id, records


def final_and_restarted(times: int) -> JobPredicate:
    def check(job: dict[str, str]) -> bool:
        return job.get("JobState") in FINAL_STATES and int(job.get("Restarts", "0")) >= times

    return check


def is_final(job: dict[str, str]) -> bool:
    return job.get("JobState") in FINAL_STATES


def running_again(times: int) -> JobPredicate:
    def check(job: dict[str, str]) -> bool:
        return job.get("JobState") == "RUNNING" and int(job.get("Restarts", "0")) >= times

    return check


def of_kind(records: list[dict[str, Any]], kind: str, attempt: int | None = None) -> list[dict[str, Any]]:
    return [r for r in records if r["kind"] == kind and (attempt is None or r["attempt"] == attempt)]


def first_line_at(path: Path, pattern: re.Pattern[str], *, timeout: float, interval: float = 0.02,
                  stop: Callable[[], bool] | None = None) -> float | None:
    """Wall time at which a line matching ``pattern`` first appeared in ``path`` (polled), or None."""
    deadline = time.monotonic() + timeout
    offset = 0
    pending = b""
    while time.monotonic() < deadline and not (stop is not None and stop()):
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
        except FileNotFoundError:
            chunk = b""
        now = time.time()
        if chunk:
            offset += len(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if any(pattern.search(line.decode(errors="replace")) for line in lines):
                return now
        time.sleep(interval)
    return None


def kill_rank(workdir: Path, job_id: str, rank: int) -> tuple[int, float]:
    """``kill -9`` the rank's process (pid file of the current attempt); returns (pid, wall time)."""
    pid = int(jobs.pid_path(workdir, job_id, rank).read_text().strip())
    os.kill(pid, signal.SIGKILL)
    return pid, time.time()


@dataclasses.dataclass
class KillPlan:
    """Kill rank ``rank`` of ``job_id`` once rank 0 printed ``after`` (a regex); done in a thread."""

    job_id: str
    workdir: Path
    rank: int = 1
    after: str = r"^0: \[rank0\]: saved checkpoint step=20 "
    pid: int | None = None
    killed_at: float | None = None
    error: str = ""

    def run(self, timeout: float = 180.0) -> None:
        path = jobs.output_path(self.workdir, self.job_id)
        seen = first_line_at(path, re.compile(self.after), timeout=timeout, interval=0.1)
        if seen is None:
            self.error = f"no line matching {self.after!r} within {timeout:.0f} s"
            return
        try:
            self.pid, self.killed_at = kill_rank(self.workdir, self.job_id, self.rank)
        except (OSError, ValueError) as exc:
            self.error = f"kill -9 of rank {self.rank} failed: {exc}"
