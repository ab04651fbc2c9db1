"""Blast-radius limits in Monitor mode, per-partition drained share, and a person's hold, on real Slurm.

The real ``trainguard run`` against the local Slurm cluster, driven only through its outside
contracts (``sbatch``/``scontrol``, ``trainguard audit --format json``):

- Monitor mode shows what Action mode would refuse: with ``maxActionsPerHour: 1`` the second
  hardware failure's outcome carries ``blast_radius.would_block`` (the first one's
  would-have-been requeue is in the window) and Slurm is left as it was.
- ``maxDrainedShare`` is per partition: a test-owned partition of two nodes (created with
  ``scontrol create`` and deleted afterwards) holds the lemon node; draining it would be 25 % of
  the cluster but 50 % of that partition, over a 30 % limit: the drain would be refused and the
  requeue still carried out (degraded, not abandoned).
- A person's hold is theirs: a job we requeue-held for a retry backoff is held again by a person
  (``scontrol hold``); after the backoff it stays held, and the audit says we left it alone.

The jobs are plain shell steps (no PyTorch): ``srun --label`` prints an Xid 79 line as task 1
(or task 0 of a one-node job) and exits 1, so every failure is a hardware failure of a known node.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
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
# Every task starts; the last task prints a hardware fault and fails, which ends the step.
sleep 4
if [ "$SLURM_PROCID" = "$((SLURM_NTASKS - 1))" ]; then
  echo "{XID}"
  exit 1
fi
sleep 60
"""

Start = Callable[[str, str], tuple[harness.Trainguard, str]]


@pytest.fixture
def start(slurm_cluster: SlurmCluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Start]:
    """``start(mode, spec)`` -> (a running ``trainguard run``, the name of its policy), stopped after the test.

    ``spec`` is policy YAML under ``spec:`` (indented two spaces); the cluster-wide ``mode`` decides."""
    runners: list[harness.Trainguard] = []

    def run(mode: str, spec: str) -> tuple[harness.Trainguard, str]:
        directory = tmp_path / f"runner{len(runners)}"
        directory.mkdir()
        policy, name = harness.isolated_policy(directory, mode="Action", spec=spec)
        runner = harness.Trainguard(slurm_cluster, directory, mode=mode, policy=policy)
        runners.append(runner)
        return runner.start(), name

    yield run
    for runner in runners:
        code = runner.stop()
        if code != 0 or request.session.testsfailed:
            print(f"\n--- {runner.log_path} (exit {code}) ---\n{runner.log()}")


def submit(cluster: SlurmCluster, workdir: Path, policy: str, *, nodes: int, partition: str | None = None) -> str:
    """A job of ``nodes`` one-task nodes whose last task hits Xid 79; returns its id."""
    workdir.mkdir(parents=True, exist_ok=True)
    task = workdir / "task.sh"
    task.write_text(TASK)
    script = workdir / f"job-{secrets.token_hex(4)}.sh"
    script.write_text(
        "#!/bin/bash\n"
        f'#SBATCH --comment="trainguard policy={policy}"\n'
        f"#SBATCH --nodes={nodes}\n#SBATCH --ntasks-per-node=1\n#SBATCH --requeue\n"
        f"#SBATCH --output={workdir}/slurm-%j.out\n"
        + (f"#SBATCH --partition={partition}\n" if partition else "")
        + f"srun --label --kill-on-bad-exit=1 bash {task}\n"
    )
    env = {k: v for k, v in cluster.env.items() if k != "SLURM_JWT"}  # srun inside a 22.05 job fails with it
    proc = subprocess.run(["sbatch", "--parsable", f"--chdir={workdir}", str(script)], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, check=False)
    job_id = proc.stdout.strip().split(";", 1)[0]
    assert proc.returncode == 0 and job_id.isdigit(), proc.stderr
    cluster.submitted.append(job_id)
    return job_id


def outcome_of(runner: harness.Trainguard, job_id: str, attempt: int = 0) -> dict[str, Any]:
    records = harness.wait_audit(runner, job_id, lambda rs: bool(harness.of_kind(rs, "outcome", attempt)),
                                 timeout=TIMEOUT, what=f"outcome of attempt {attempt}")
    payload: dict[str, Any] = harness.of_kind(records, "outcome", attempt)[0]["payload"]
    return payload


def hold_reason(cluster: SlurmCluster, job_id: str) -> str:
    """Slurm's reason code of the job (``squeue --json``; ``scontrol`` shows the description instead)."""
    for job in json.loads(cluster.run("squeue", "--json"))["jobs"]:
        if str(job["job_id"]) == job_id:
            return str(job["state_reason"])
    raise AssertionError(f"squeue does not show job {job_id}")


@contextlib.contextmanager
def partition(cluster: SlurmCluster, nodes: list[str]) -> Iterator[str]:
    """A partition of ``nodes`` that exists only for the test (slurmctld keeps it until deleted)."""
    name = f"tg{secrets.token_hex(3)}"
    cluster.scontrol("create", f"PartitionName={name}", f"Nodes={','.join(nodes)}", "State=UP")
    try:
        yield name
    finally:
        cluster.scontrol("delete", f"PartitionName={name}")


def test_monitor_mode_records_that_action_mode_would_exceed_the_actions_per_hour(
    slurm_cluster: SlurmCluster, start: Start, tmp_path: Path,
) -> None:
    runner, policy = start("monitor", "  blastRadius: {maxActionsPerHour: 1}\n" + harness.NO_LEMONS)
    ids = [submit(slurm_cluster, tmp_path / "jobs", policy, nodes=2)]
    try:
        allowed = outcome_of(runner, ids[0])
        ids.append(submit(slurm_cluster, tmp_path / "jobs", policy, nodes=2))
        blocked = outcome_of(runner, ids[1])
        jobs = [harness.wait_job(slurm_cluster, j, harness.is_final, timeout=TIMEOUT, what="final") for j in ids]
    finally:
        for job_id in ids:
            harness.cancel_if_active(slurm_cluster, job_id)

    assert [(j["JobState"], j["Restarts"], j["ExcNodeList"]) for j in jobs] == [("FAILED", "0", "(null)")] * 2
    assert allowed["disposition"] == "Monitored"
    assert allowed["blast_radius"]["would_block"] is False
    assert allowed["blast_radius"]["checks"][0]["in_window"] == 0
    assert blocked["disposition"] == "Monitored"
    limit = blocked["blast_radius"]
    assert limit["would_block"] is True
    assert limit["checks"][0] | {"reason": ""} == {
        "limit": "maxActionsPerHour", "maximum": 1.0, "in_window": 1, "planned": 1, "would_block": True, "reason": "",
    }
    assert "would have carried out" in limit["counted"]
    assert "Action mode would be blocked" in blocked["detail"]
    actions = harness.of_kind(runner.audit(ids[1]), "action", 0)
    assert actions and all("would be blocked" in a["payload"]["error"] for a in actions)
    assert "slurm-local: requeue" not in runner.log()


def test_the_drained_share_is_per_partition(slurm_cluster: SlurmCluster, start: Start, tmp_path: Path) -> None:
    """node4 is 1 of 4 nodes of the cluster (25 %) but 1 of 2 of the test partition (50 % > 30 %)."""
    spec = ("  actions: {allowed: [requeue, stop, drainNode]}\n"
            "  exclusion: {lemonNodeThreshold: 1, drainLemonNodes: true}\n"
            "  blastRadius: {maxActionsPerHour: 100, maxDrainedShare: 0.3}\n")
    runner, policy = start("monitor", spec)
    nodes = slurm_cluster.nodes[-2:]
    with partition(slurm_cluster, nodes) as small:
        ids = [submit(slurm_cluster, tmp_path / "jobs", policy, nodes=2, partition=small)]
        try:
            outcome_of(runner, ids[0])  # names the node of task 1: remembered
            ids.append(submit(slurm_cluster, tmp_path / "jobs", policy, nodes=2, partition=small))
            blocked = outcome_of(runner, ids[1])  # the same node again: a lemon, drained
            for job_id in ids:
                harness.wait_job(slurm_cluster, job_id, harness.is_final, timeout=TIMEOUT, what="final")
        finally:
            for job_id in ids:
                harness.cancel_if_active(slurm_cluster, job_id)
        node_states = slurm_cluster.scontrol("-o", "show", "node", nodes[-1])

    advice = harness.of_kind(runner.audit(ids[1]), "advice", 0)[0]["payload"]
    assert advice["drain_nodes"] == [nodes[-1]], advice["reasons"]
    assert "DRAIN" not in node_states  # Monitor: nothing done
    limit = blocked["blast_radius"]
    # Degraded, not abandoned: the drain would be refused, the requeue still carried out.
    assert limit["would_block"] is False and limit["refused_drains"] == [nodes[-1]]
    shares = {c["partition"]: (c["partition_nodes"], c["share"], c["would_block"]) for c in limit["refused"]
              if c["limit"] == "maxDrainedShare"}
    assert shares == {small: (2, 0.5, True)}
    assert f"partition {small} (50%)" in limit["refused"][0]["reason"]
    assert "the drains would be refused" in blocked["detail"]


@pytest.mark.slow(reason="a real requeue, a person's hold placed during it, and a wait that shows the hold stays")
def test_a_person_hold_on_a_job_we_requeue_held_stays(
    slurm_cluster: SlurmCluster, start: Start, tmp_path: Path,
) -> None:
    """Retry 2 is requeued held for a 30 s backoff; a person holds the job meanwhile; it stays held."""
    spec = ("  retries: {maxAttemptsWithoutCheckpoint: 10, backoff: {initialSeconds: 30}}\n"
            "  detection: {settle: 2s}\n" + harness.NO_LEMONS)
    runner, policy = start("action", spec)
    job_id = submit(slurm_cluster, tmp_path / "jobs", policy, nodes=1)
    try:
        held = harness.wait_job(
            slurm_cluster, job_id, lambda j: j.get("Restarts") == "2" and j.get("Priority") == "0", timeout=TIMEOUT,
            what="requeue-held for the backoff of retry 2", runner=runner, workdir=tmp_path / "jobs")
        assert held["Reason"] == "job_requeued_in_held_state"
        harness.wait_audit(runner, job_id, lambda rs: any(
            r["payload"]["step"] == "exclude_nodes" and r["payload"]["status"] == "done"
            for r in harness.of_kind(rs, "action", 1)), timeout=TIMEOUT, what="our requeue-hold and exclusion")
        slurm_cluster.scontrol("hold", job_id)  # a person, later
        assert hold_reason(slurm_cluster, job_id) == "JobHeldAdmin"
        outcome = outcome_of(runner, job_id, attempt=1)
        after = slurm_cluster.show(job_id)
        records = runner.audit(job_id)
    finally:
        harness.cancel_if_active(slurm_cluster, job_id)

    assert outcome["disposition"] == "Abandoned", outcome
    assert (after["JobState"], after["Priority"], after["Restarts"]) == ("PENDING", "0", "2"), harness.summary(after)
    [watchdog] = harness.of_kind(records, "watchdog", 1)
    assert watchdog["payload"]["released_hold"] is False
    assert "JobHeldAdmin" in watchdog["payload"]["left_human_hold"]
    assert watchdog["payload"]["hold"] == {"reason": "JobHeldAdmin", "detail": "job requeued in held state"}
    steps = {a["payload"]["step"]: a["payload"] for a in harness.of_kind(records, "action", 1)}
    assert steps["requeue_hold"]["arguments"]["hold_seen"] == {"reason": "JobHeldUser",
                                                               "detail": "job requeued in held state"}
    assert steps["release"]["status"] == "skipped" and steps["release"]["error"].startswith("left alone")
