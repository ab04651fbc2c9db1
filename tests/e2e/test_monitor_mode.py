"""End to end on real Slurm, Monitor mode: the full recommendation is recorded and Slurm is left alone.

``trainguard run --mode monitor`` is the cluster-wide switch: even the session's Action-mode
policy is forced to Monitor. The job is the hardware-crash scenario of the Action-mode tier
(Xid 79 on one node), so the difference is only the mode: here the audit must hold the same
anomaly, verdict and advice (with ``mode: Monitor``), action rows that say ``skipped``, and the
job must end FAILED exactly as Slurm left it: no restart, no excluded node, same nodes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e import harness
from tests.e2e.conftest import StartTrainguard
from tests.support.slurm import SlurmCluster, expand_hostlist

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

JOB_TIMEOUT = 180.0
QUIET_AFTER_END = 8.0
"""How long the failed job must stay as it is (a requeue shows in Restarts at once)."""


def test_monitor_mode_records_the_advice_and_changes_nothing_in_slurm(
    slurm_cluster: SlurmCluster, start_trainguard: StartTrainguard, e2e_dir: Path
) -> None:
    runner, policy = start_trainguard("monitor", "monitor")
    workdir = e2e_dir / "jobs"
    job_id = harness.submit(slurm_cluster, workdir, job_name="e2e-monitor", nodes=2, steps=100, step_time=0.1,
                            log_every=5, fault="xid", fault_rank=1, fault_step=15,
                            comment=f"trainguard policy={policy}")
    try:
        before = harness.wait_job(slurm_cluster, job_id, lambda j: j.get("JobState") == "RUNNING", timeout=JOB_TIMEOUT,
                                  what="RUNNING", runner=runner, workdir=workdir)
        after = harness.wait_job(slurm_cluster, job_id, harness.is_final, timeout=JOB_TIMEOUT, what="final",
                                 runner=runner, workdir=workdir)
        records = harness.wait_audit(runner, job_id, lambda rs: bool(harness.of_kind(rs, "outcome", 0)), timeout=60,
                                     what="outcome")
        deadline = time.monotonic() + QUIET_AFTER_END
        while time.monotonic() < deadline:
            later = slurm_cluster.show(job_id)
            assert (later["JobState"], later["Restarts"]) == ("FAILED", "0"), harness.summary(later)
            time.sleep(1.0)
    finally:
        harness.cancel_if_active(slurm_cluster, job_id)

    # Slurm: exactly what it did on its own
    assert (after["JobState"], after["Restarts"]) == ("FAILED", "0"), harness.diagnosis(runner, workdir, job_id)
    for key in ("Restarts", "ExcNodeList", "NodeList", "Comment", "Requeue"):
        assert after.get(key) == before.get(key), f"{key}: {before.get(key)} -> {after.get(key)}"
    assert after.get("ExcNodeList") == "(null)"
    assert "batch attempt 1" not in harness.output(workdir, job_id)

    # Audit: the same recommendation as in Action mode, marked Monitor, nothing carried out
    banners = [m for m in harness.BANNER_RE.finditer(harness.output(workdir, job_id)) if m["rank"] == "1"]
    bad = banners[0]["node"]
    assert bad in expand_hostlist(after["NodeList"])
    anomaly = harness.of_kind(records, "anomaly", 0)[0]["payload"]
    assert (anomaly["symptom"], anomaly["suspect_nodes"]) == ("crash", [bad]), anomaly["summary"]
    assert anomaly["category"] in {"gpu_fallen_off_bus", "gpu_xid_hardware"}
    verdict = harness.of_kind(records, "verdict", 0)[0]["payload"]
    assert (verdict["attribution"], verdict["nodes"]) == ("hardware", [bad])
    advice = harness.of_kind(records, "advice", 0)
    assert len(advice) == 1, advice
    assert advice[0]["payload"]["mode"] == "Monitor"
    assert (advice[0]["payload"]["action"], advice[0]["payload"]["exclusions"]) == ("requeue", [bad])
    actions = harness.of_kind(records, "action", 0)
    assert [a["payload"].get("operation", "") for a in actions] == ["requeue_hold", "exclude_nodes", "release"]
    assert {a["payload"]["status"] for a in actions} == {"skipped"}, actions
    assert harness.of_kind(records, "outcome", 0)[0]["payload"]["disposition"] == "Monitored"
    assert "slurm-local: requeue" not in runner.log() and "slurm-local: release" not in runner.log()


@pytest.mark.slow(reason="a hang is only a hang after its silence window has passed on a real job")
def test_monitor_mode_records_crash_and_hang_advice_and_changes_nothing(
    slurm_cluster: SlurmCluster, start_trainguard: StartTrainguard, e2e_dir: Path
) -> None:
    """The application-crash and hang scenarios under the Monitor switch: advice recorded, Slurm untouched."""
    runner, policy = start_trainguard("monitor", "monitor-more")
    workdir = e2e_dir / "jobs-more"
    opt_in = f"trainguard policy={policy}"
    crash = harness.submit(slurm_cluster, workdir, job_name="e2e-monitor-crash", nodes=2, steps=80, step_time=0.1,
                           log_every=5, fault="crash", fault_rank=1, fault_step=15, comment=opt_in)
    hang = harness.submit(slurm_cluster, workdir, job_name="e2e-monitor-hang", nodes=2, steps=80, step_time=0.1,
                          log_every=5, fault="hang", fault_rank=1, fault_step=15,
                          comment=f"{opt_in} hang-timeout=15s")
    try:
        crashed = harness.wait_job(slurm_cluster, crash, harness.is_final, timeout=JOB_TIMEOUT, what="final",
                                   runner=runner, workdir=workdir)
        hang_records = harness.wait_audit(runner, hang, lambda rs: bool(harness.of_kind(rs, "outcome", 0)),
                                          timeout=JOB_TIMEOUT, what="hang outcome")
        crash_records = harness.wait_audit(runner, crash, lambda rs: bool(harness.of_kind(rs, "outcome", 0)),
                                           timeout=60, what="crash outcome")
        time.sleep(QUIET_AFTER_END)
        hung = slurm_cluster.show(hang)
        later = slurm_cluster.show(crash)
    finally:
        harness.cancel_if_active(slurm_cluster, crash)
        harness.cancel_if_active(slurm_cluster, hang)

    assert (crashed["JobState"], crashed["Restarts"]) == ("FAILED", "0"), harness.diagnosis(runner, workdir, crash)
    assert (later["JobState"], later["Restarts"]) == ("FAILED", "0")
    assert (hung["JobState"], hung["Restarts"]) == ("RUNNING", "0"), harness.summary(hung)
    for records, symptom in ((crash_records, "crash"), (hang_records, "hang")):
        anomaly = harness.of_kind(records, "anomaly", 0)[0]["payload"]
        assert anomaly["symptom"] == symptom, anomaly["summary"]
        (advice,) = harness.of_kind(records, "advice", 0)
        assert (advice["payload"]["mode"], advice["payload"]["action"]) == ("Monitor", "requeue")
        assert {a["payload"]["status"] for a in harness.of_kind(records, "action", 0)} == {"skipped"}
        assert harness.of_kind(records, "outcome", 0)[0]["payload"]["disposition"] == "Monitored"
    assert "slurm-local: requeue" not in runner.log()
