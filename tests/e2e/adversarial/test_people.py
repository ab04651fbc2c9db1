"""Adversarial, on the real local Slurm cluster: people. Every state we did not create is someone's decision.

Each scenario runs its own ``trainguard run`` (its own SQLite audit database) against the shared real
cluster, all of them at once (one thread each), through the product's outside contracts only:

- ``scancel``: a user cancels their running, opted-in job. The teardown lines (``*** STEP N.0 ON nodeX
  CANCELLED AT ...``) used to be read as a ``process_signal_killed`` crash and the job was requeued:
  a user could not stop their own job. Now: an ``action`` record with status ``not-ours`` (a person
  cancelled it), no anomaly from the teardown, no advice, the job stays cancelled.
- ``unwatched``: two opted-in jobs end before any runner exists (one FAILED with an Xid, one cancelled
  by its user); a runner then starts on a fresh database. It used to requeue both. Now each is recorded
  as ``ended-unwatched`` and nothing is done.
- ``kept``: a runner tracks a job and is stopped; the job fails with an Xid while nobody watches; a new
  runner on the same database recovers it (requeue without the bad node): the promise of a restart.
- ``outage``: the scheduler is unreachable for the runner (its own copy of ``slurm.conf`` points at a
  dead port, ``test_outages.SwitchableConf``) when the job fails. The advice is recorded, its first step
  cannot run; the generation used to be abandoned at once and never carried out. Now it stays pending
  and is carried out, with the advised exclusion, once the scheduler answers again.
- ``monitor-restart``: the same stalled advice, then ``kill -9`` of the runner, and a new runner on the
  same database started with ``--mode monitor``: the cluster switch is off, so the pending Action
  generation is closed by the watchdog (reason: the switch is off) and Slurm is left exactly as it was.
- ``requeued-in-flight``: the same stalled advice; meanwhile a person requeues the job their way
  (``scontrol requeue``). When the scheduler answers again our recovery stops before its first step
  (a change that is not ours: requeued by someone else): no second requeue, no exclusion of ours.
- ``pause``: ``trainguard actions pause`` (the runtime pause, no restart) before the job fails: the Action
  advice is recorded and not carried out; the audit says actions are paused, and by whom.

After them, alone (it takes a node out of service): ``node-fail``: an administrator sets the job's node
FAIL with their own reason while the job runs; the job's GPU then fails there and the advice drains the
node (a lemon under that policy): our drain used to write our reason over theirs. Now the drain step is
skipped ("left alone: a person manages the node") and their reason stays.

Every wait is bounded; jobs are cancelled and nodes resumed at the end whatever happens.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
import subprocess
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness
from tests.e2e.adversarial.test_outages import SwitchableConf
from tests.support.slurm import SlurmCluster, expand_hostlist

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

TIMEOUT = 360.0
"""One scenario's wait for a state, with six runners and their jobs sharing two cores."""
SCENARIOS = ("scancel", "unwatched", "kept", "outage", "monitor-restart", "requeued-in-flight", "pause")
BACKOFF_NO_LEMONS = harness.NO_LEMONS


@dataclasses.dataclass
class Scenario:
    name: str
    jobs: dict[str, str] = dataclasses.field(default_factory=dict)
    runners: list[harness.Trainguard] = dataclasses.field(default_factory=list)
    final: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    records: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    notes: dict[str, Any] = dataclasses.field(default_factory=dict)
    error: str = ""

    def why(self, workdir: Path) -> str:
        parts = [f"scenario {self.name} jobs {self.jobs}: {self.error}"]
        for i, runner in enumerate(self.runners):
            parts.append(f"--- runner {i + 1} log (end) ---\n" + "\n".join(runner.log().splitlines()[-30:]))
        for job, records in self.records.items():
            parts += [f"audit {job}: {r['kind']} #{r['attempt']} {json.dumps(r['payload'])[:240]}" for r in records]
        for job_id in self.jobs.values():
            parts.append(f"--- job {job_id} output (end) ---\n"
                         + "\n".join(harness.output(workdir, job_id).splitlines()[-12:]))
        return "\n".join(parts)


def db_records(runner: harness.Trainguard, job_id: str) -> list[dict[str, Any]]:
    """The job's audit records read straight from the runner's SQLite file (cheap enough to poll)."""
    path = runner.db_url.removeprefix("sqlite:///")
    if not Path(path).exists():
        return []
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            rows = db.execute("SELECT kind, attempt, payload FROM audit_log WHERE workload LIKE ? ORDER BY id",
                              (f"%/{job_id}",)).fetchall()
    except sqlite3.OperationalError:
        return []  # not created or not migrated yet
    return [{"kind": k, "attempt": a, "payload": json.loads(p) if isinstance(p, str) else p} for k, a, p in rows]


def until(what: str, check: Callable[[], Any], timeout: float = TIMEOUT, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"no {what} within {timeout:.0f} s")
        time.sleep(interval)


def not_ours(records: list[dict[str, Any]], change: str | None = None) -> list[dict[str, Any]]:
    return [r["payload"] for r in records if r["kind"] == "action" and r["payload"].get("status") == "not-ours"
            and (change is None or r["payload"].get("change") == change)]


def watchdog_reasons(records: list[dict[str, Any]]) -> list[str]:
    return [str(r["payload"].get("reason", "")) for r in records if r["kind"] == "watchdog"]


def banner_node(workdir: Path, job_id: str, rank: int = 0, attempt: int = 0) -> str:
    found = [m["node"] for m in harness.BANNER_RE.finditer(harness.output(workdir, job_id))
             if m["attempt"] == str(attempt) and m["rank"] == str(rank)]
    return found[0] if found else ""


def tracked(runner: harness.Trainguard, job_id: str) -> bool:
    return f"/{job_id} (job {job_id}," in runner.log()


def final(cluster: SlurmCluster, job_id: str) -> dict[str, str]:
    return until(f"job {job_id} final", lambda: (j := cluster.show(job_id)).get("JobState") in harness.FINAL_STATES
                 and j)


def xid_job(cluster: SlurmCluster, workdir: Path, name: str, policy: str, *, fault_step: int,
            steps: int = 400) -> str:
    """A one-node job whose rank 0 prints a kernel Xid and dies at ``fault_step`` (0.1 s a step), first
    attempt only; a requeued attempt runs ``steps`` steps and completes."""
    return harness.submit(cluster, workdir, job_name=f"people-{name}", nodes=1, steps=steps, step_time=0.1,
                          log_every=10, ckpt_every=1000, fault="xid", fault_rank=0, fault_step=fault_step,
                          comment=f"trainguard policy={policy}")


def long_job(cluster: SlurmCluster, workdir: Path, name: str, policy: str) -> str:
    return harness.submit(cluster, workdir, job_name=f"people-{name}", nodes=1, steps=3000, step_time=0.1,
                          log_every=10, ckpt_every=1000, comment=f"trainguard policy={policy}")


def running(cluster: SlurmCluster, workdir: Path, job_id: str) -> None:
    until(f"job {job_id} running with its banner", lambda: bool(banner_node(workdir, job_id)))


# ------------------------------------------------------------------ the scenarios


def scancel(s: Scenario, cluster: SlurmCluster, base: Path, workdir: Path) -> None:
    policy, name = harness.isolated_policy(base, spec=BACKOFF_NO_LEMONS)
    runner = harness.Trainguard(cluster, base / "runner", mode="action", policy=policy).start(TIMEOUT)
    s.runners.append(runner)
    s.jobs["job"] = job_id = long_job(cluster, workdir, "scancel", name)
    running(cluster, workdir, job_id)
    until("the runner tracking the job", lambda: tracked(runner, job_id))
    until("a progress line read", lambda: "step 20/" in harness.output(workdir, job_id))
    cluster.cancel(job_id)  # the user's own scancel
    s.final["job"] = final(cluster, job_id)
    until("the person's cancel on record", lambda: not_ours(db_records(runner, job_id), "cancelled"))
    until("the teardown printed", lambda: "CANCELLED AT" in harness.output(workdir, job_id), timeout=60)
    # The runner reads the output until it stops tracking the finished job (its grace period): by then
    # every teardown line was read and whatever it decides on them is decided.
    done = re.compile(rf"no longer tracking \S+/{job_id}: finished")
    until("the runner done with the job", lambda: bool(done.search(runner.log())))
    s.final["job"] = cluster.show(job_id)
    s.records["job"] = runner.audit(job_id, timeout=TIMEOUT)


def unwatched(s: Scenario, cluster: SlurmCluster, base: Path, workdir: Path) -> None:
    policy, name = harness.isolated_policy(base, spec=BACKOFF_NO_LEMONS)
    s.jobs["failed"] = failed = xid_job(cluster, workdir, "unwatched-xid", name, fault_step=5)
    s.jobs["cancelled"] = cancelled = long_job(cluster, workdir, "unwatched-cancel", name)
    running(cluster, workdir, cancelled)
    cluster.cancel(cancelled)
    final(cluster, failed)
    final(cluster, cancelled)
    runner = harness.Trainguard(cluster, base / "runner", mode="action", policy=policy).start(TIMEOUT)  # fresh db
    s.runners.append(runner)
    for key, job_id in s.jobs.items():
        until(f"{key} recorded as ended before we watched",
              lambda job_id=job_id: not_ours(db_records(runner, job_id), "ended-unwatched"))
    for key, job_id in s.jobs.items():
        s.final[key] = cluster.show(job_id)
        s.records[key] = runner.audit(job_id, timeout=TIMEOUT)


def kept(s: Scenario, cluster: SlurmCluster, base: Path, workdir: Path) -> None:
    policy, name = harness.isolated_policy(base, spec=BACKOFF_NO_LEMONS)
    first = harness.Trainguard(cluster, base / "runner", mode="action", policy=policy).start(TIMEOUT)
    s.runners.append(first)
    s.jobs["job"] = job_id = xid_job(cluster, workdir, "kept", name, fault_step=120, steps=200)
    running(cluster, workdir, job_id)
    until("the runner tracking the job", lambda: tracked(first, job_id))
    s.notes["bad_node"] = banner_node(workdir, job_id)
    first.stop()  # stopped cleanly (an upgrade); the job fails while nobody watches
    until("the Xid printed", lambda: "Xid" in harness.output(workdir, job_id))
    second = harness.Trainguard(cluster, base / "runner", mode="action", policy=policy)
    second.log_path = first.log_path.with_name("trainguard-run-2.log")
    s.runners.append(second)
    second.start(TIMEOUT)
    s.final["job"] = harness.wait_job(cluster, job_id, harness.final_and_restarted(1), timeout=TIMEOUT,
                                      what="final after a requeue", runner=second, workdir=workdir)
    s.records["job"] = second.audit(job_id, timeout=TIMEOUT)


def _stalled_advice(s: Scenario, cluster: SlurmCluster, base: Path, workdir: Path, label: str
                    ) -> tuple[harness.Trainguard, SwitchableConf, Path, str]:
    """A runner whose scheduler is unreachable when its job fails: the advice is recorded, its first step
    cannot run, the runner says so. Returns the runner, its switchable conf, the policy file and job id."""
    policy, name = harness.isolated_policy(base, spec=BACKOFF_NO_LEMONS)
    conf = SwitchableConf(cluster, base)
    runner = harness.Trainguard(cluster, base / "runner", mode="action", policy=policy, env=conf.env)
    runner.start(TIMEOUT)
    s.runners.append(runner)
    s.jobs["job"] = job_id = xid_job(cluster, workdir, label, name, fault_step=200, steps=260)
    running(cluster, workdir, job_id)
    until("the runner tracking the job", lambda: tracked(runner, job_id))
    s.notes["bad_node"] = banner_node(workdir, job_id)
    conf.down()
    until("the advice recorded", lambda: any(r["kind"] == "advice" for r in db_records(runner, job_id)))
    until("the step stopped by the outage", lambda: "stopped by an outage" in runner.log())
    return runner, conf, policy, job_id


def outage(s: Scenario, cluster: SlurmCluster, base: Path, workdir: Path) -> None:
    runner, conf, _policy, job_id = _stalled_advice(s, cluster, base, workdir, "outage")
    s.notes["pending_during_outage"] = not any(r["kind"] == "outcome" for r in db_records(runner, job_id))
    conf.up()
    s.final["job"] = harness.wait_job(cluster, job_id, harness.final_and_restarted(1), timeout=TIMEOUT,
                                      what="final after a requeue", runner=runner, workdir=workdir)
    s.records["job"] = runner.audit(job_id, timeout=TIMEOUT)


def monitor_restart(s: Scenario, cluster: SlurmCluster, base: Path, workdir: Path) -> None:
    runner, conf, policy, job_id = _stalled_advice(s, cluster, base, workdir, "monitor-restart")
    runner.process.kill()  # type: ignore[union-attr]  # kill -9 between the advice and its first step
    runner.process.wait(timeout=30)  # type: ignore[union-attr]
    conf.up()
    s.notes["before"] = harness.summary(final(cluster, job_id))
    second = harness.Trainguard(cluster, base / "runner", mode="monitor", policy=policy, env=conf.env)
    second.log_path = runner.log_path.with_name("trainguard-run-monitor.log")
    s.runners.append(second)
    second.start(TIMEOUT)
    until("the pending generation closed", lambda: any(r["kind"] == "outcome" for r in db_records(second, job_id)))
    s.final["job"] = cluster.show(job_id)
    s.records["job"] = second.audit(job_id, timeout=TIMEOUT)


def requeued_in_flight(s: Scenario, cluster: SlurmCluster, base: Path, workdir: Path) -> None:
    runner, conf, _policy, job_id = _stalled_advice(s, cluster, base, workdir, "requeued-in-flight")
    final(cluster, job_id)
    # A person requeues it their way (held, to look at it first) while our recovery waits.
    cluster.scontrol("requeuehold", job_id)
    until("the person's requeue", lambda: int(cluster.show(job_id).get("Restarts", "0")) >= 1)
    conf.up()
    until("our generation closed", lambda: any(r["kind"] == "outcome" for r in db_records(runner, job_id)))
    # Slurm shows REQUEUE_HOLD while the old attempt's teardown completes, then PENDING with the hold
    s.final["job"] = until("the job pending, held", lambda: (j := cluster.show(job_id)).get("JobState") == "PENDING"
                           and j, timeout=120)
    until("the person's records", lambda: len(not_ours(db_records(runner, job_id))) >= 2, timeout=120)
    s.records["job"] = runner.audit(job_id, timeout=TIMEOUT)


def pause(s: Scenario, cluster: SlurmCluster, base: Path, workdir: Path) -> None:
    policy, name = harness.isolated_policy(base, spec=BACKOFF_NO_LEMONS)
    runner = harness.Trainguard(cluster, base / "runner", mode="action", policy=policy).start(TIMEOUT)
    s.runners.append(runner)
    proc = subprocess.run([str(harness.TRAINGUARD), "actions", "pause", "--reason", "rack 12 maintenance",
                           "--by", "oncall", "--db", runner.db_url], env=cluster.env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert proc.returncode == 0, proc.stderr
    s.jobs["job"] = job_id = xid_job(cluster, workdir, "pause", name, fault_step=30, steps=150)
    until("the generation closed", lambda: any(r["kind"] == "outcome" for r in db_records(runner, job_id)))
    s.final["job"] = final(cluster, job_id)
    s.records["job"] = runner.audit(job_id, timeout=TIMEOUT)
    status = subprocess.run([str(harness.TRAINGUARD), "actions", "status", "--format", "json", "--db", runner.db_url],
                            env=cluster.env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=TIMEOUT, check=False)
    s.notes["status"] = json.loads(status.stdout) if status.returncode == 0 else status.stderr


DRIVERS: dict[str, Callable[[Scenario, SlurmCluster, Path, Path], None]] = {
    "scancel": scancel, "unwatched": unwatched, "kept": kept, "outage": outage, "monitor-restart": monitor_restart,
    "requeued-in-flight": requeued_in_flight, "pause": pause,
}


@pytest.fixture(scope="module")
def workdir(e2e_dir: Path) -> Path:
    return e2e_dir / "people-jobs"


@pytest.fixture(scope="module")
def scenarios(slurm_cluster: SlurmCluster, e2e_dir: Path, workdir: Path) -> Iterator[dict[str, Scenario]]:
    found = {name: Scenario(name) for name in SCENARIOS}

    def drive(s: Scenario) -> None:
        base = e2e_dir / f"people-{s.name}"
        try:
            base.mkdir(parents=True, exist_ok=True)
            DRIVERS[s.name](s, slurm_cluster, base, workdir)
        except BaseException as exc:  # kept for the test that reports this scenario
            s.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"

    threads = [threading.Thread(target=drive, args=(s,), name=s.name, daemon=True) for s in found.values()]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=TIMEOUT * 4)
        yield found
    finally:
        for s in found.values():
            for runner in s.runners:
                runner.stop()
            for job_id in s.jobs.values():
                harness.cancel_if_active(slurm_cluster, job_id)


def check(s: Scenario, workdir: Path) -> None:
    assert not s.error, s.why(workdir)


def test_a_users_scancel_is_theirs_never_requeued(scenarios: dict[str, Scenario], workdir: Path) -> None:
    s = scenarios["scancel"]
    check(s, workdir)
    job, records = s.final["job"], s.records["job"]
    assert (job["JobState"], job["Restarts"]) == ("CANCELLED", "0"), s.why(workdir)
    assert not harness.of_kind(records, "advice"), s.why(workdir)
    assert not [a for a in harness.of_kind(records, "anomaly") if a["payload"]["category"] == "process_signal_killed"]
    [change] = not_ours(records)
    assert (change["by"], change["change"]) == ("person", "cancelled"), change


def test_endings_nobody_watched_are_recorded_never_acted_on(scenarios: dict[str, Scenario], workdir: Path) -> None:
    s = scenarios["unwatched"]
    check(s, workdir)
    assert s.final["failed"]["JobState"] == "FAILED" and s.final["cancelled"]["JobState"] == "CANCELLED"
    for key in ("failed", "cancelled"):
        assert s.final[key]["Restarts"] == "0", s.why(workdir)
        records = s.records[key]
        assert not harness.of_kind(records, "advice") and not harness.of_kind(records, "anomaly"), s.why(workdir)
        assert [c["change"] for c in not_ours(records)] == ["ended-unwatched"], s.why(workdir)


def test_a_failure_while_we_were_down_of_a_tracked_job_is_recovered(
        scenarios: dict[str, Scenario], workdir: Path) -> None:
    s = scenarios["kept"]
    check(s, workdir)
    bad = s.notes["bad_node"]
    assert s.final["job"]["JobState"] == "COMPLETED", s.why(workdir)
    assert bad in expand_hostlist(s.final["job"].get("ExcNodeList", "")), s.why(workdir)
    [advice] = harness.of_kind(s.records["job"], "advice", 0)
    assert advice["payload"]["action"] == "requeue" and advice["payload"]["exclusions"] == [bad]


def test_a_recovery_stalled_by_a_scheduler_outage_resumes_with_its_exclusion(
        scenarios: dict[str, Scenario], workdir: Path) -> None:
    s = scenarios["outage"]
    check(s, workdir)
    bad = s.notes["bad_node"]
    assert s.notes["pending_during_outage"], "the generation was closed during the outage"
    assert s.final["job"]["JobState"] == "COMPLETED", s.why(workdir)
    assert bad in expand_hostlist(s.final["job"].get("ExcNodeList", "")), s.why(workdir)
    steps = [r["payload"]["step"] for r in harness.of_kind(s.records["job"], "action", 0)
             if r["payload"].get("status") == "intent"]
    assert steps == ["requeue_hold", "exclude_nodes", "release"], steps  # each step once
    assert [o["payload"]["disposition"] for o in harness.of_kind(s.records["job"], "outcome", 0)] == ["Converged"]


def test_a_monitor_mode_restart_with_pending_action_advice_changes_nothing(
        scenarios: dict[str, Scenario], workdir: Path) -> None:
    s = scenarios["monitor-restart"]
    check(s, workdir)
    assert harness.summary(s.final["job"]) == s.notes["before"], s.why(workdir)
    assert (s.final["job"]["JobState"], s.final["job"]["Restarts"]) == ("FAILED", "0"), s.why(workdir)
    records = s.records["job"]
    assert not [r for r in harness.of_kind(records, "action") if r["payload"].get("status") in ("intent", "done")]
    reasons = watchdog_reasons(records)
    assert any("not carried out" in r and "cluster switch is off" in r for r in reasons), s.why(workdir)


def test_a_persons_requeue_while_our_recovery_waits_stops_it(scenarios: dict[str, Scenario], workdir: Path) -> None:
    s = scenarios["requeued-in-flight"]
    check(s, workdir)
    records, job = s.records["job"], s.final["job"]
    assert job["Restarts"] == "1", s.why(workdir)  # theirs only: ours never ran
    assert (job["JobState"], job["Priority"]) == ("PENDING", "0"), s.why(workdir)  # their hold stays
    assert s.notes["bad_node"] not in expand_hostlist(job.get("ExcNodeList", "") or ""), s.why(workdir)
    assert not [r for r in harness.of_kind(records, "action", 0) if r["payload"].get("status") in ("intent", "done")]
    reasons = watchdog_reasons(records)
    assert any("a change that is not ours" in r and "requeued by someone else" in r for r in reasons), s.why(workdir)
    # attempt 0 requeued by them, and attempt 1 held by them: both theirs, both on record
    assert [(c["change"]) for c in not_ours(records)] == ["requeued", "held"], s.why(workdir)


def test_a_pause_stops_actions_without_a_restart_and_says_by_whom(
        scenarios: dict[str, Scenario], workdir: Path) -> None:
    s = scenarios["pause"]
    check(s, workdir)
    assert (s.final["job"]["JobState"], s.final["job"]["Restarts"]) == ("FAILED", "0"), s.why(workdir)
    records = s.records["job"]
    [advice] = harness.of_kind(records, "advice", 0)
    assert advice["payload"]["action"] == "requeue" and advice["payload"]["mode"] == "Action"
    assert any("actions are paused by oncall: rack 12 maintenance" in r for r in watchdog_reasons(records))
    status = s.notes["status"]
    assert isinstance(status, dict), status
    assert (status["paused"], status["reason"], status["by"]) == (True, "rack 12 maintenance", "oncall"), status


# ------------------------------------------------------------------ alone: a node a person took out of service

NODE_FAIL_POLICY = (
    "  exclusion: {lemonNodeThreshold: 1, drainLemonNodes: true}\n"
    "  actions: {allowed: [requeue, stop, drainNode]}\n"
    "  blastRadius: {maxDrainedShare: 1.0}\n"
)


@pytest.mark.slow(
    reason="a real failure on a node a person drained, and a wait long enough to show nothing is done to it")
def test_a_node_a_person_took_out_of_service_is_never_drained_over_their_reason(
        slurm_cluster: SlurmCluster, e2e_dir: Path, workdir: Path, scenarios: dict[str, Scenario]) -> None:
    """An administrator sets the job's node FAIL (out of service once its jobs end; Slurm lets them run)
    with their own reason; then the job's GPU fails there. The advice excludes the node and, the node
    being a lemon under this policy, drains it: the drain used to write our reason over theirs (and a
    later undrain of ours would have returned their node to service). Now the drain step leaves it alone."""
    del scenarios  # runs after the concurrent scenarios: it takes a node out of service
    base = e2e_dir / "people-node-fail"
    base.mkdir(parents=True, exist_ok=True)
    policy, name = harness.isolated_policy(base, spec=NODE_FAIL_POLICY)
    runner = harness.Trainguard(slurm_cluster, base / "runner", mode="action", policy=policy).start(TIMEOUT)
    job_id, bad = "", ""
    try:
        job_id = xid_job(slurm_cluster, workdir, "node-fail", name, fault_step=100, steps=100)
        running(slurm_cluster, workdir, job_id)
        bad = banner_node(workdir, job_id)
        slurm_cluster.scontrol("update", f"NodeName={bad}", "State=FAIL", "Reason=admin: PSU swap")
        records = harness.wait_audit(runner, job_id, lambda rs: bool(harness.of_kind(rs, "outcome", 0)),
                                     timeout=TIMEOUT, what="outcome of attempt 0")
        node = slurm_cluster.run("scontrol", "show", "node", bad)
        assert "Reason=admin: PSU swap" in node, node
        [advice] = harness.of_kind(records, "advice", 0)
        assert advice["payload"]["drain_nodes"] == [bad], advice  # the scenario needs the drain advised
        drains = [r["payload"] for r in harness.of_kind(records, "action", 0)
                  if r["payload"].get("operation") == "drain_node"]
        assert drains and all(d["status"] == "skipped" and "a person manages the node" in d["error"]
                              for d in drains), drains
        final_job = harness.wait_job(slurm_cluster, job_id, harness.final_and_restarted(1), timeout=TIMEOUT,
                                     what="final after the requeue", runner=runner, workdir=workdir)
        assert bad in expand_hostlist(final_job.get("ExcNodeList", "")), harness.summary(final_job)
    finally:
        runner.stop()
        if job_id:
            harness.cancel_if_active(slurm_cluster, job_id)
        if bad:
            slurm_cluster.scontrol("update", f"NodeName={bad}", "State=RESUME")
