"""Limits that hold when failures come together, on the real local Slurm cluster.

The real ``trainguard run --mode action`` against real Slurm, driven only through its outside
contracts (``sbatch``/``scontrol``, ``trainguard audit`` and ``trainguard actions``):

- Several jobs fail in the same second under ``maxActionsPerHour: 2``: exactly two are requeued.
  Before, each recovery checked the window of completed action rows and the ones decided in the
  same round did not see each other (3 or more of N were carried out).
- The administrator's cap (``TRAINGUARD_MAX_ACTIONS_PER_HOUR``) is above a policy that allows 100:
  when it refuses, the breaker opens and stays open (``trainguard actions status``) until a person
  runs ``trainguard actions reset-breaker``; both are in the audit trail.

The jobs are one-node shell steps (no PyTorch) submitted together: each waits for the same
wall-clock second, prints an Xid 79 line and exits 1, so all of them fail within that second (the
local cluster runs eight one-core tasks at once).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

TIMEOUT = 240.0
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."
TASK = f"""#!/bin/bash
# Every job fails at the same wall-clock second (the epoch given as $1), whenever it started.
while [ "$(date +%s)" -lt "$1" ]; do sleep 0.05; done
echo "{XID}"
exit 1
"""
LEAD_S = 10
"""Seconds from the submission to the common failure: enough for every job to start."""
JOBS = 8

Start = Callable[..., harness.Trainguard]


@pytest.fixture
def start(slurm_cluster: SlurmCluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Start]:
    """``start(spec, env=...)`` -> a running ``trainguard run --mode action`` with its own policy (``.policy``)."""
    runners: list[harness.Trainguard] = []

    def run(spec: str, env: dict[str, str] | None = None, poll: float = 1.0) -> harness.Trainguard:
        directory = tmp_path / f"runner{len(runners)}"
        directory.mkdir()
        policy, name = harness.isolated_policy(directory, mode="Action", spec=spec)
        runner = harness.Trainguard(slurm_cluster, directory, mode="action", policy=policy, poll=poll,
                                    env={**slurm_cluster.env, **(env or {})})
        runner.policy_name = name  # type: ignore[attr-defined]
        runners.append(runner)
        return runner.start()

    yield run
    for runner in runners:
        code = runner.stop()
        if code != 0 or request.session.testsfailed:
            print(f"\n--- {runner.log_path} (exit {code}) ---\n{runner.log()}")


def submit_together(cluster: SlurmCluster, workdir: Path, policy: str, count: int) -> list[str]:
    """``count`` one-node jobs with the same fault step, submitted back to back; their ids."""
    workdir.mkdir(parents=True, exist_ok=True)
    task = workdir / "task.sh"
    task.write_text(TASK)
    env = {k: v for k, v in cluster.env.items() if k != "SLURM_JWT"}  # srun inside a 22.05 job fails with it
    ids: list[str] = []
    fail_at = int(time.time()) + LEAD_S
    for _ in range(count):
        script = workdir / f"job-{secrets.token_hex(4)}.sh"
        script.write_text(
            "#!/bin/bash\n"
            f'#SBATCH --comment="trainguard policy={policy}"\n'
            "#SBATCH --nodes=1\n#SBATCH --ntasks=1\n#SBATCH --requeue\n"
            f"#SBATCH --output={workdir}/slurm-%j.out\n"
            f"srun --label --kill-on-bad-exit=1 bash {task} {fail_at}\n")
        proc = subprocess.run(["sbatch", "--parsable", f"--chdir={workdir}", str(script)], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, check=False)
        job_id = proc.stdout.strip().split(";", 1)[0]
        assert proc.returncode == 0 and job_id.isdigit(), proc.stderr
        cluster.submitted.append(job_id)
        ids.append(job_id)
    return ids


def first_outcomes(runner: harness.Trainguard, ids: list[str]) -> dict[str, dict[str, Any]]:
    """The outcome of attempt 0 of every job in ``ids`` (waits for all of them)."""
    def all_closed(records: list[dict[str, Any]]) -> bool:
        return all(any(r["kind"] == "outcome" and r.get("attempt") == 0 and r["workload"].endswith(f"/{j}")
                       for r in records) for j in ids)

    records = harness.wait_audit(runner, None, all_closed, timeout=TIMEOUT,  # type: ignore[arg-type]
                                 what="the outcome of every job's first failure")
    return {j: next(r["payload"] for r in records if r["kind"] == "outcome" and r.get("attempt") == 0
                    and r["workload"].endswith(f"/{j}")) for j in ids}


def actions_cli(runner: harness.Trainguard, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(harness.TRAINGUARD), "actions", *args, "--db", runner.db_url],
                          env=runner.cluster.env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=60, check=False)


def test_jobs_failing_in_the_same_second_stay_within_max_actions_per_hour(
    slurm_cluster: SlurmCluster, start: Start, tmp_path: Path,
) -> None:
    # A slow listing (every 3 s) sees the jobs end in the same round: their recoveries are decided together.
    runner = start("  blastRadius: {maxActionsPerHour: 2}\n" + harness.NO_LEMONS, poll=3.0)
    ids = submit_together(slurm_cluster, tmp_path / "jobs", runner.policy_name, JOBS)  # type: ignore[attr-defined]
    try:
        outcomes = first_outcomes(runner, ids)
        jobs = {j: harness.wait_job(slurm_cluster, j, harness.is_final, timeout=TIMEOUT, what="final") for j in ids}
    finally:
        for job_id in ids:
            harness.cancel_if_active(slurm_cluster, job_id)

    restarts = sorted(int(job["Restarts"]) for job in jobs.values())
    assert restarts == [0] * (JOBS - 2) + [1] * 2, {j: harness.summary(job) for j, job in jobs.items()}
    dispositions = sorted(o["disposition"] for o in outcomes.values())
    assert dispositions == ["Abandoned"] * (JOBS - 2) + ["Converged"] * 2, outcomes
    for job_id, outcome in outcomes.items():
        if outcome["disposition"] == "Abandoned":
            assert "maxActionsPerHour 2" in outcome["detail"], outcome
            assert jobs[job_id]["Restarts"] == "0"


def test_an_administrators_cap_opens_the_breaker_until_a_person_resets_it(
    slurm_cluster: SlurmCluster, start: Start, tmp_path: Path,
) -> None:
    runner = start("  blastRadius: {maxActionsPerHour: 100}\n" + harness.NO_LEMONS,
                   env={"TRAINGUARD_MAX_ACTIONS_PER_HOUR": "1"})
    ids = submit_together(slurm_cluster, tmp_path / "jobs", runner.policy_name, 3)  # type: ignore[attr-defined]
    try:
        outcomes = first_outcomes(runner, ids)
        jobs = {j: harness.wait_job(slurm_cluster, j, harness.is_final, timeout=TIMEOUT, what="final") for j in ids}
    finally:
        for job_id in ids:
            harness.cancel_if_active(slurm_cluster, job_id)

    assert sum(int(job["Restarts"]) for job in jobs.values()) <= 1  # the policy allows 100, the cap 1
    refused = [o for o in outcomes.values() if o["detail"].startswith("blocked by an administrator's cap")]
    assert refused, outcomes
    assert all(o["blast_radius"]["breaker"].endswith("> cluster cap max-actions-per-hour 1") for o in refused)

    status = actions_cli(runner, "status", "--format", "json")
    assert status.returncode == 0, status.stderr
    breaker = json.loads(status.stdout)["breaker"]
    assert breaker["open"] is True and "max-actions-per-hour 1" in breaker["reason"]

    reset = actions_cli(runner, "reset-breaker", "--reason", "checked the switch", "--by", "oncall")
    assert reset.returncode == 0 and "breaker reset" in reset.stdout, reset.stderr
    after = json.loads(actions_cli(runner, "status", "--format", "json").stdout)["breaker"]
    assert after["open"] is False and after["by"] == "oncall"
    trail = [r["payload"] for r in runner.audit() if r["kind"] == "action"]
    operations = [p.get("operation") for p in trail if p.get("control") == "actions-breaker"]
    assert operations == ["breaker-open", "breaker-reset"], trail


def test_a_drain_the_limit_refuses_still_leaves_the_requeue_done(
    slurm_cluster: SlurmCluster, start: Start, tmp_path: Path,
) -> None:
    """A job of a test partition of two nodes fails twice on the same node: the second time that node is
    a lemon to drain, 50 % of the partition, over the policy's 30 %. The drain is refused and recorded;
    the requeue the job needed is carried out (before, the whole advice was abandoned)."""
    from tests.e2e.adversarial import test_limits_and_holds as limits_e2e

    spec = ("  actions: {allowed: [requeue, stop, drainNode]}\n"
            "  exclusion: {lemonNodeThreshold: 1, drainLemonNodes: true}\n"
            "  retries: {maxAttemptsWithoutCheckpoint: 10, backoff: {initialSeconds: 0}}\n"
            "  blastRadius: {maxActionsPerHour: 100, maxDrainedShare: 0.3}\n")
    runner = start(spec)
    nodes = slurm_cluster.nodes[-2:]
    with limits_e2e.partition(slurm_cluster, nodes) as small:
        job_id = limits_e2e.submit(slurm_cluster, tmp_path / "jobs", runner.policy_name,  # type: ignore[attr-defined]
                                   nodes=2, partition=small)
        try:
            def degraded(records: list[dict[str, Any]]) -> bool:
                return any(r["kind"] == "outcome" and r["payload"].get("blast_radius", {}).get("refused_drains")
                           for r in records)

            records = harness.wait_audit(runner, job_id, degraded, timeout=TIMEOUT, what="a degraded outcome")
            job = slurm_cluster.show(job_id)
        finally:
            harness.cancel_if_active(slurm_cluster, job_id)
        node_state = slurm_cluster.scontrol("-o", "show", "node", nodes[-1])

    [outcome] = [r for r in records if r["kind"] == "outcome" and r["payload"].get("blast_radius", {}).get(
        "refused_drains")]
    payload = outcome["payload"]
    assert payload["disposition"] == "Converged" and "degraded" in payload["detail"], payload
    assert payload["blast_radius"]["refused_drains"] == [nodes[-1]]
    assert f"partition {small} (50%)" in payload["blast_radius"]["refused"][0]["reason"]
    steps = {r["payload"]["step"]: r["payload"] for r in harness.of_kind(records, "action", outcome["attempt"])
             if r["payload"].get("generation") == payload["generation"]}
    drain = steps[f"drain_node:{nodes[-1]}"]
    assert drain["status"] == "skipped" and drain["error"].startswith("skipped: refused by a blast-radius limit")
    requeued = [p for name, p in steps.items() if name.startswith("requeue") and p["status"] == "done"]
    assert requeued, steps
    assert int(job["Restarts"]) > outcome["attempt"]  # the requeue of the degraded advice happened
    assert "DRAIN" not in node_state
