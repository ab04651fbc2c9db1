"""End to end on real Slurm, Action mode: a real fault in a real training job -> recovery -> the job completes.

One ``trainguard run --mode action`` subprocess watches the local 4-node cluster while the
scenarios below run *concurrently* (submitted together by the module fixture, so the tier takes
about as long as its slowest scenario). Each test then checks the final Slurm state
(``scontrol``: JobState, Restarts, ExcNodeList, NodeList) and the audit trail read back with
``trainguard audit --format json`` (anomaly, verdict, advice, action rows, outcome).

Scenarios (tests/workloads/train.py injects the faults; first attempt only unless said):
hardware Xid 79 on one node; a Python exception on one rank; a hang in a collective; a real
``kill -9`` of a rank; a crash on every attempt with ``max-retries=1``; exit code 93; and a
crashing job that did not opt in. Every wait is bounded; every job is cancelled at the end.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness
from tests.e2e.conftest import StartTrainguard
from tests.support.slurm import SlurmCluster, expand_hostlist
from tests.workloads import jobs

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

STEP_TIME = 0.1
"""Seconds per training step: a healthy 2-node attempt of 100 steps lasts ~10 s plus start-up."""
RECOVERY_TIMEOUT = 300.0
"""Submit -> final state of a scenario with one requeue, with every scenario sharing two CPU cores."""
HANG_TIMEOUT = "20s"
"""The hang scenario's per-job override: long above the ~1 s between two progress lines even when
seven jobs start torch at once on two cores, short enough to keep the test quick."""
QUIET_AFTER_STOP = 8.0
"""After a stop decision, how long the job must stay finished (a requeue would show at once in
Restarts; a requeued job runs again after ~6 s here)."""


@dataclasses.dataclass
class Batch:
    """The concurrently running scenarios: name -> job id, and what the test needs to check them."""

    cluster: SlurmCluster
    runner: harness.Trainguard
    workdir: Path
    policy: str
    ids: dict[str, str]
    kill: harness.KillPlan
    kill_thread: threading.Thread

    def wait_final(self, name: str, restarts: int = 0) -> dict[str, str]:
        return harness.wait_job(self.cluster, self.ids[name], harness.final_and_restarted(restarts),
                                timeout=RECOVERY_TIMEOUT, what=f"final with Restarts>={restarts}",
                                runner=self.runner, workdir=self.workdir)

    def audit(self, name: str) -> list[dict[str, Any]]:
        return self.runner.audit(self.ids[name])

    def output(self, name: str) -> str:
        return harness.output(self.workdir, self.ids[name])

    def why(self, name: str) -> str:
        return harness.diagnosis(self.runner, self.workdir, self.ids[name])


@pytest.fixture(scope="module")
def batch(slurm_cluster: SlurmCluster, start_trainguard: StartTrainguard, e2e_dir: Path) -> Iterator[Batch]:
    runner, policy = start_trainguard("action", "action")
    workdir = e2e_dir / "jobs"
    opt_in = f"trainguard policy={policy}"
    common: dict[str, Any] = {"nodes": 2, "step_time": STEP_TIME, "log_every": 5, "ckpt_every": 20}
    specs: dict[str, dict[str, Any]] = {
        "hardware": {"steps": 100, "fault": "xid", "fault_rank": 1, "fault_step": 15, "comment": opt_in},
        "application": {"steps": 80, "fault": "crash", "fault_rank": 1, "fault_step": 30, "comment": opt_in},
        "hang": {"steps": 80, "fault": "hang", "fault_rank": 1, "fault_step": 25,
                 "comment": f"{opt_in} hang-timeout={HANG_TIMEOUT}"},
        "kill9": {"steps": 150, "comment": opt_in},
        "exhausted": {"steps": 60, "fault": "crash", "fault_rank": 1, "fault_step": 5, "fault_all_attempts": True,
                      "comment": f"{opt_in} max-retries=1"},
        "exit93": {"steps": 60, "fault": "exit93", "fault_step": 5, "comment": opt_in},
        "not_opted_in": {"steps": 60, "fault": "crash", "fault_rank": 1, "fault_step": 5,
                         "comment": "experiment-42 owner=alice"},
    }
    ids: dict[str, str] = {}
    try:
        for name, spec in specs.items():
            ids[name] = harness.submit(slurm_cluster, workdir, job_name=f"e2e-{name}", **common, **spec)
        kill = harness.KillPlan(ids["kill9"], workdir)
        # the kill9 job may wait in the queue behind the others: its deadline is a scenario's, not 3 min
        thread = threading.Thread(target=kill.run, args=(RECOVERY_TIMEOUT,), name="kill-9", daemon=True)
        thread.start()
        yield Batch(slurm_cluster, runner, workdir, policy, ids, kill, thread)
    finally:
        for job_id in ids.values():
            harness.cancel_if_active(slurm_cluster, job_id)


def _one_outcome(records: list[dict[str, Any]], attempt: int) -> dict[str, Any]:
    outcomes = harness.of_kind(records, "outcome", attempt)
    assert len(outcomes) == 1, outcomes
    return outcomes[0]


def _operations(records: list[dict[str, Any]], attempt: int, status: str = "done") -> list[str]:
    return [r["payload"].get("operation", "") for r in harness.of_kind(records, "action", attempt)
            if r["payload"]["status"] == status]


def _recovered_by_requeue(batch: Batch, name: str) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Common checks of a scenario that one plain requeue (no exclusion) recovers."""
    job = batch.wait_final(name, restarts=1)
    assert (job["JobState"], job["Restarts"], job["ExitCode"]) == ("COMPLETED", "1", "0:0"), batch.why(name)
    assert job.get("ExcNodeList", "(null)") == "(null)", "no node excluded"
    records = batch.audit(name)
    advice = harness.of_kind(records, "advice", 0)
    assert [a["payload"]["action"] for a in advice] == ["requeue"], batch.why(name)
    assert advice[0]["payload"]["exclude_nodes"] == [] and advice[0]["payload"]["mode"] == "Action"
    assert _operations(records, 0) == ["requeue"], batch.why(name)
    assert _one_outcome(records, 0)["payload"]["disposition"] == "Converged"
    # The healthy second attempt is left alone: no advice asks anything of it. On a loaded machine its
    # steps may slow down and be recorded as a slowdown (an advice of action none, nothing done).
    acted = [a["payload"] for a in harness.of_kind(records, "advice", 1) if a["payload"]["action"] != "none"]
    assert not acted, f"the healthy second attempt is left alone: {acted} {batch.why(name)}"
    assert _operations(records, 1) == [] and _operations(records, 1, "intent") == []
    assert f"batch attempt 1 of job {batch.ids[name]}" in batch.output(name)
    assert "training complete" in batch.output(name)
    return job, records


@pytest.mark.slow(
    reason="a real job on three nodes fails, is requeued without the bad node and runs to completion on the others")
def test_hardware_crash_requeues_without_the_bad_node_and_completes_on_the_others(batch: Batch) -> None:
    job = batch.wait_final("hardware", restarts=1)
    text = batch.output("hardware")
    first = [m for m in harness.BANNER_RE.finditer(text) if m["attempt"] == "0"]
    bad = next(m["node"] for m in first if m["rank"] == "1")
    assert (job["JobState"], job["Restarts"], job["ExitCode"]) == ("COMPLETED", "1", "0:0"), batch.why("hardware")
    assert bad in expand_hostlist(job["ExcNodeList"]), job
    assert bad not in expand_hostlist(job["NodeList"]), job
    assert "training complete" in text

    records = batch.audit("hardware")
    anomaly = harness.of_kind(records, "anomaly", 0)[0]["payload"]
    assert anomaly["symptom"] == "crash"
    assert anomaly["category"] in {"gpu_fallen_off_bus", "gpu_xid_hardware"}, anomaly["category"]
    assert anomaly["suspect_nodes"] == [bad]
    assert any("Xid" in e["text"] and e["node"] == bad for e in anomaly["evidence"])
    verdict = harness.of_kind(records, "verdict", 0)[0]["payload"]
    assert (verdict["attribution"], verdict["nodes"]) == ("hardware", [bad])
    advice = harness.of_kind(records, "advice", 0)
    assert len(advice) == 1 and advice[0]["payload"]["action"] == "requeue", batch.why("hardware")
    assert advice[0]["payload"]["exclusions"] == [bad] and advice[0]["payload"]["mode"] == "Action"
    assert _operations(records, 0) == ["requeue_hold", "exclude_nodes", "release"], batch.why("hardware")
    exclude = next(r for r in harness.of_kind(records, "action", 0)
                   if r["payload"].get("operation", "") == "exclude_nodes")
    assert exclude["payload"]["arguments"]["excluded_nodes"] == [bad]
    assert _one_outcome(records, 0)["payload"]["disposition"] == "Converged"
    # audit first: anomaly -> verdict -> advice -> actions -> outcome, in time order
    order = [r["kind"] for r in records if r["attempt"] == 0]
    assert order.index("anomaly") < order.index("verdict") < order.index("advice") < order.index("action")
    assert order[-1] == "outcome"
    assert job.get("Reason") != "job_requeued_in_held_state", "never left held"


def test_application_crash_is_requeued_and_resumes_from_the_checkpoint(batch: Batch) -> None:
    _job, records = _recovered_by_requeue(batch, "application")
    anomaly = harness.of_kind(records, "anomaly", 0)[0]["payload"]
    assert anomaly["symptom"] == "crash" and anomaly["category"] == "python_exception", anomaly["summary"]
    assert any("injected failure on rank 1" in e["text"] for e in anomaly["evidence"])
    assert harness.of_kind(records, "verdict", 0)[0]["payload"]["attribution"] == "application"
    text = batch.output("application")
    resumed = jobs.RESUMED_RE.search(text)
    assert resumed is not None and resumed["step"] == "20", "attempt 1 resumed from the step-20 checkpoint"


def test_hang_in_a_collective_is_detected_and_the_stuck_attempt_requeued(batch: Batch) -> None:
    _job, records = _recovered_by_requeue(batch, "hang")
    anomaly = harness.of_kind(records, "anomaly", 0)[0]["payload"]
    assert anomaly["symptom"] == "hang", anomaly
    assert anomaly["category"] in {"progress_stalled", "nccl_timeout"}, anomaly["category"]
    silence = anomaly["detected_at"] - anomaly["first_seen_at"]
    assert silence >= 20.0, f"reported after {silence:.1f} s of silence, before the 20 s hang timeout"
    assert "entering a blocking call" in batch.output("hang")


def test_kill_9_of_a_rank_is_detected_and_the_job_requeued(batch: Batch) -> None:
    batch.kill_thread.join(timeout=RECOVERY_TIMEOUT)
    killed_at = batch.kill.killed_at
    assert batch.kill.error == "" and killed_at is not None, batch.kill.error or batch.why("kill9")
    _job, records = _recovered_by_requeue(batch, "kill9")
    anomaly = harness.of_kind(records, "anomaly", 0)[0]["payload"]
    assert anomaly["symptom"] == "crash", anomaly
    assert anomaly["first_seen_at"] >= killed_at - 1.0, "detected from lines written after the kill"
    assert jobs.RESUMED_RE.search(batch.output("kill9")) is not None


def test_retries_exhausted_stops_the_job(batch: Batch) -> None:
    job = batch.wait_final("exhausted", restarts=1)
    records = harness.wait_audit(batch.runner, batch.ids["exhausted"],
                                 lambda rs: bool(harness.of_kind(rs, "outcome", 1)), timeout=60,
                                 what="outcome for attempt 1")
    assert [a["payload"]["action"] for a in harness.of_kind(records, "advice", 0)] == ["requeue"]
    assert [a["payload"]["action"] for a in harness.of_kind(records, "advice", 1)] == ["stop"], batch.why("exhausted")
    assert _operations(records, 0) == ["requeue"]
    assert "requeue" not in _operations(records, 1) + _operations(records, 1, "intent")
    again = _stays_finished(batch, "exhausted")
    # FAILED if the attempt ended before the stop was carried out, CANCELLED if the cancel got there first
    assert again["JobState"] in {"FAILED", "CANCELLED"}, harness.summary(again)
    assert job["Restarts"] == again["Restarts"] == "1", "not requeued after the stop advice"


def test_exit_code_93_is_not_requeued(batch: Batch) -> None:
    job = batch.wait_final("exit93")
    assert (job["JobState"], job["ExitCode"]) == ("FAILED", "93:0"), harness.summary(job)
    records = harness.wait_audit(batch.runner, batch.ids["exit93"],
                                 lambda rs: bool(harness.of_kind(rs, "advice", 0)), timeout=60, what="advice")
    actions = {a["payload"]["action"] for a in harness.of_kind(records, "advice")}
    assert actions <= {"stop", "none"} and actions, batch.why("exit93")
    assert not [r for r in harness.of_kind(records, "action")
                if r["payload"].get("operation", "").startswith("requeue")]
    again = _stays_finished(batch, "exit93")
    assert (again["JobState"], again["Restarts"]) == ("FAILED", "0")


def test_a_job_without_the_opt_in_is_never_touched(batch: Batch) -> None:
    job = batch.wait_final("not_opted_in")
    assert (job["JobState"], job["Restarts"]) == ("FAILED", "0"), harness.summary(job)
    assert "injected failure" in batch.output("not_opted_in")
    again = _stays_finished(batch, "not_opted_in")
    assert (again["JobState"], again["Restarts"]) == ("FAILED", "0")
    assert batch.audit("not_opted_in") == []
    workloads = {r["workload"] for r in batch.runner.audit()}
    assert workloads, "the runner did record the opted-in jobs"
    assert not any(w.rsplit("/", 1)[-1] == batch.ids["not_opted_in"] for w in workloads)


def _stays_finished(batch: Batch, name: str) -> dict[str, str]:
    """The job keeps its final state and restart count for ``QUIET_AFTER_STOP`` seconds; returns the last read."""
    first = batch.cluster.show(batch.ids[name])
    deadline = time.monotonic() + QUIET_AFTER_STOP
    while True:
        now = batch.cluster.show(batch.ids[name])
        seen = (now.get("JobState"), now.get("Restarts"))
        assert seen == (first.get("JobState"), first.get("Restarts")), f"job changed after it ended: {seen}"
        if time.monotonic() >= deadline:
            return now
        time.sleep(1.0)
