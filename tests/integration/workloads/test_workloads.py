"""The training workload (tests/workloads/) behaves like a real distributed job on real Slurm.

Later end-to-end tests point Trainguard at these jobs and expect the failure to be *real*: a
crashed rank that takes the others down with gloo errors, a hang where every rank stops
printing, a requeued attempt that resumes from its checkpoint, a hardware line naming the node,
a ``kill -9`` that ends the step. These tests check that the workload delivers exactly that on
the local multi-node cluster (``slurm_cluster`` fixture, hack/local-slurm.sh), so an e2e failure
points at Trainguard and not at the workload. The last few tests run ``train.py`` as one local
process to check its handling of bad input and its checkpoint resume without Slurm.

Every wait is bounded; every job a test submits is cancelled when the test ends.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.slurm import SlurmCluster, expand_hostlist
from tests.workloads import jobs

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed: pip install -e '.[workloads]'",
)

STEP_TIME = 0.05
"""Seconds of simulated accelerator time per step: short jobs, little CPU on a shared machine."""
JOB_TIMEOUT = 180.0
"""Submit to end of a short job. Healthy: ~10 s here (process start and torch import dominate)."""
REQUEUE_TIMEOUT = 90.0
"""A requeued job waits cred_expire+1 s (6 s) plus a scheduler pass; generous for a busy host."""
QUIET_SECONDS = 8.0
"""How long a hung job's output must stay unchanged; a healthy one prints every ~0.5 s here."""
ACTIVE_STATES = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "SUSPENDED"}
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"}

BANNER_RE = re.compile(
    r"^(?P<task>\d+): \[rank(?P<rank>\d+)\]: rank (?P=rank) on node (?P<node>\S+) pid (?P<pid>\d+)"
    r" attempt (?P<attempt>\d+) \(world (?P<world>\d+), job (?P<job>\d+)\)$",
    re.MULTILINE,
)
LOSS_RE = re.compile(r"^0: \[rank0\]: step \d+/\d+ \| loss (?P<loss>[\d.]+) \|", re.MULTILINE)


class Workloads:
    """Submits training jobs into one test's directory and cancels whatever is still active at the end."""

    def __init__(self, cluster: SlurmCluster, workdir: Path) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.job_ids: list[str] = []

    def submit(self, **settings: Any) -> str:
        settings.setdefault("step_time", STEP_TIME)
        settings.setdefault("nodes", 2)
        job_id = self.cluster.submit(jobs.training_job_script(workdir=self.workdir, **settings))
        self.job_ids.append(job_id)
        return job_id

    def output(self, job_id: str) -> str:
        path = jobs.output_path(self.workdir, job_id)
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_output(self, job_id: str, pattern: str, timeout: float = JOB_TIMEOUT) -> re.Match[str]:
        """Wait until the job's output matches ``pattern`` (multiline regex); fail with the output.

        Fails early when the job has ended without printing it.
        """
        regex = re.compile(pattern, re.MULTILINE)
        deadline = time.monotonic() + timeout
        while True:
            match = regex.search(self.output(job_id))
            if match is not None:
                return match
            state = self.cluster.show(job_id).get("JobState")
            if time.monotonic() >= deadline or (state in FINAL_STATES and regex.search(self.output(job_id)) is None):
                output = self.output(job_id)
                raise AssertionError(f"job {job_id} ({state}): no {pattern!r} (waited <= {timeout:.0f} s):\n{output}")
            time.sleep(0.5)

    def wait_final(self, job_id: str, timeout: float = JOB_TIMEOUT) -> dict[str, str]:
        return self.cluster.wait_for(job_id, FINAL_STATES, timeout=timeout)

    def banners(self, job_id: str) -> dict[tuple[int, int], re.Match[str]]:
        """(attempt, rank) -> the rank's start banner."""
        return {(int(m["attempt"]), int(m["rank"])): m for m in BANNER_RE.finditer(self.output(job_id))}

    def cancel_active(self) -> None:
        for job_id in self.job_ids:
            try:
                if self.cluster.show(job_id).get("JobState") in ACTIVE_STATES:
                    self.cluster.cancel(job_id)
            except AssertionError:
                pass  # already purged by slurmctld: nothing left to cancel


@pytest.fixture
def workloads(slurm_cluster: SlurmCluster, tmp_path: Path) -> Iterator[Workloads]:
    helper = Workloads(slurm_cluster, tmp_path)
    try:
        yield helper
    finally:
        helper.cancel_active()


def restarted(times: int) -> Callable[[dict[str, str]], bool]:
    def running_again(job: dict[str, str]) -> bool:
        return job.get("JobState") == "RUNNING" and int(job.get("Restarts", "0")) >= times

    running_again.__name__ = f"RUNNING with Restarts>={times}"
    return running_again


@pytest.mark.parametrize("nodes", [2, 4])
@pytest.mark.integration
@pytest.mark.slurm
def test_healthy_job_completes_with_progress_from_every_rank_and_a_checkpoint(workloads: Workloads, nodes: int) -> None:
    if nodes > len(workloads.cluster.nodes):
        pytest.skip(f"the local cluster has {len(workloads.cluster.nodes)} nodes")
    job_id = workloads.submit(nodes=nodes, steps=60, ckpt_every=20, log_every=10)
    job = workloads.wait_final(job_id)
    text = workloads.output(job_id)
    assert (job["JobState"], job["ExitCode"]) == ("COMPLETED", "0:0"), text

    banners = workloads.banners(job_id)
    assert sorted(banners) == [(0, rank) for rank in range(nodes)], text
    assert {m["node"] for m in banners.values()} == set(expand_hostlist(job["NodeList"])), "one rank per node"
    assert {int(m["world"]) for m in banners.values()} == {nodes}

    aggregate = [int(m["step"]) for m in jobs.PROGRESS_RE.finditer(text)]
    assert aggregate == [10, 20, 30, 40, 50, 60], text
    local_ranks = {int(m["rank"]) for m in jobs.LOCAL_RE.finditer(text)}
    assert local_ranks == set(range(nodes)), "every rank prints its own throughput"
    assert all(m["task"] == m["rank"] for m in jobs.LOCAL_RE.finditer(text)), "srun label = rank"
    losses = [float(m["loss"]) for m in LOSS_RE.finditer(text)]
    assert losses[-1] < losses[0], f"the model learns: {losses}"

    saved = [(int(m["step"]), m["path"]) for m in jobs.CHECKPOINT_RE.finditer(text)]
    checkpoint = jobs.checkpoint_path(workloads.workdir, job_id)
    assert saved == [(20, str(checkpoint)), (40, str(checkpoint)), (60, str(checkpoint))], text
    assert checkpoint.stat().st_size > 0
    assert not list(checkpoint.parent.glob(".*.tmp")), "no half-written checkpoint left behind"
    for rank in range(nodes):
        assert jobs.pid_path(workloads.workdir, job_id, rank).read_text().strip() == banners[(0, rank)]["pid"]
    assert "training complete: 60 steps" in text


FORCE_TERMINATED_RE = re.compile(r"^srun: Force Terminated (?:job step |StepId=)?\d+\.0$", re.MULTILINE)


def srun_reported(text: str, task_line: str) -> bool:
    """srun names the failed task (``task_line``), unless slurmctld's "step complete" reached srun
    before that task's exit message did: srun then stops waiting and prints ``Force Terminated``
    instead, never naming the task (seen on Slurm 24.11 under load). Both are real endings, which
    is why detection never relies on srun's line."""
    return task_line in text or FORCE_TERMINATED_RE.search(text) is not None


@pytest.mark.integration
@pytest.mark.slurm
def test_crash_of_one_rank_fails_the_job_with_the_exception_and_a_gloo_cascade(workloads: Workloads) -> None:
    job_id = workloads.submit(steps=60, fault="crash", fault_rank=1, fault_step=5)
    job = workloads.wait_final(job_id)
    text = workloads.output(job_id)
    assert job["JobState"] == "FAILED", text
    node = workloads.banners(job_id)[(0, 1)]["node"]
    assert f"1: [rank1]: RuntimeError: injected failure on rank 1 (node {node}) at step 5" in text
    assert srun_reported(text, f"srun: error: {node}: task 1: Exited with exit code 1"), text
    # rank 0 was in all_reduce: gloo reports the lost peer, or srun's kill-on-bad-exit got there first
    assert "Connection closed by peer" in text or "0: slurmstepd" in text, text
    assert "training complete" not in text


@pytest.mark.integration
@pytest.mark.slurm
def test_requeued_job_resumes_from_its_latest_checkpoint(workloads: Workloads) -> None:
    job_id = workloads.submit(steps=400, ckpt_every=20, log_every=10)
    workloads.wait_output(job_id, r"^0: \[rank0\]: saved checkpoint step=40 ")
    workloads.cluster.scontrol("requeue", job_id)
    workloads.cluster.wait_for(job_id, restarted(1), timeout=REQUEUE_TIMEOUT)
    resumed = workloads.wait_output(job_id, r"^0: \[rank0\]: resumed from checkpoint step=(\d+) \(attempt 1\)$")

    text = workloads.output(job_id)
    first_attempt = text[: text.index("batch attempt 1 of job")]
    saved_before = [int(m["step"]) for m in jobs.CHECKPOINT_RE.finditer(first_attempt)]
    assert int(resumed.group(1)) == saved_before[-1], "resumes from the latest checkpoint of attempt 0"
    assert {(1, 0), (1, 1)} <= set(workloads.banners(job_id)), "both ranks started again as attempt 1"
    next_step = saved_before[-1] + 10 - saved_before[-1] % 10
    workloads.wait_output(job_id, rf"^0: \[rank0\]: step {next_step}/400 ", timeout=60)


@pytest.mark.integration
@pytest.mark.slurm
def test_xid_fault_prints_the_driver_line_for_its_node_and_fails(workloads: Workloads) -> None:
    job_id = workloads.submit(steps=60, fault="xid", fault_rank=1, fault_step=5)
    job = workloads.wait_final(job_id)
    text = workloads.output(job_id)
    assert job["JobState"] == "FAILED", text
    banner = workloads.banners(job_id)[(0, 1)]
    xid = re.compile(
        rf"^1: \w{{3}} [ \d]\d \d\d:\d\d:\d\d {re.escape(banner['node'])} kernel: NVRM: Xid \(PCI:0000:3b:00\): 79,"
        rf" pid={banner['pid']}, name=python, GPU has fallen off the bus\.$",
        re.MULTILINE,
    )
    assert xid.search(text), text
    assert "1: [rank1]: RuntimeError: CUDA error: unspecified launch failure" in text


@pytest.mark.integration
@pytest.mark.slurm
def test_hang_stops_all_progress_while_the_job_stays_running(workloads: Workloads) -> None:
    job_id = workloads.submit(steps=400, fault="hang", fault_rank=1, fault_step=15, log_every=5)
    workloads.wait_output(job_id, r"^1: \[rank1\]: step 15: entering a blocking call$")
    # the last lines each rank prints before the hang; srun forwards the two ranks' output
    # separately, so rank 0's may land after rank 1's hang line: the quiet period starts after all
    for rank in (0, 1):
        workloads.wait_output(job_id, rf"^{rank}: \[rank{rank}\]: local step 10 ", timeout=30)
    size = len(workloads.output(job_id))
    deadline = time.monotonic() + QUIET_SECONDS
    while time.monotonic() < deadline:
        assert workloads.cluster.show(job_id)["JobState"] == "RUNNING"
        time.sleep(1.0)
    text = workloads.output(job_id)
    assert len(text) == size, f"the output kept growing during a hang:\n{text[size:]}"
    assert max(int(m["step"]) for m in jobs.PROGRESS_RE.finditer(text)) < 15
    workloads.cluster.cancel(job_id)
    assert workloads.cluster.wait_for(job_id, "CANCELLED", timeout=60)["JobState"] == "CANCELLED"


@pytest.mark.integration
@pytest.mark.slurm
def test_kill_9_of_one_rank_fails_the_job(workloads: Workloads) -> None:
    job_id = workloads.submit(steps=400, log_every=5)
    workloads.wait_output(job_id, r"^0: \[rank0\]: step 5/400 ")
    banner = workloads.banners(job_id)[(0, 1)]
    pid = int(jobs.pid_path(workloads.workdir, job_id, 1).read_text())
    assert pid == int(banner["pid"])
    os.kill(pid, signal.SIGKILL)
    job = workloads.wait_final(job_id, timeout=60)
    text = workloads.output(job_id)
    assert job["JobState"] == "FAILED", text
    assert srun_reported(text, f"srun: error: {banner['node']}: task 1: Killed"), text
    assert "training complete" not in text


@pytest.mark.integration
@pytest.mark.slurm
def test_exit93_ends_the_job_with_the_do_not_requeue_code(workloads: Workloads) -> None:
    job_id = workloads.submit(steps=60, fault="exit93", fault_step=5)
    job = workloads.wait_final(job_id)
    text = workloads.output(job_id)
    assert (job["JobState"], job["ExitCode"]) == ("FAILED", f"{jobs.DO_NOT_REQUEUE_EXIT}:0"), text
    assert text.count("exiting with code 93 (do not requeue)") == 2


@pytest.mark.integration
@pytest.mark.slurm
def test_slow_rank_lowers_throughput_and_shows_in_its_own_compute_time(workloads: Workloads) -> None:
    job_id = workloads.submit(
        steps=40, fault="slow", fault_rank=1, fault_step=11, log_every=10, extra_env={"TG_FAULT_SLOW_SECONDS": "0.25"}
    )
    job = workloads.wait_final(job_id)
    text = workloads.output(job_id)
    assert job["JobState"] == "COMPLETED", text
    compute = {(int(m["rank"]), int(m["step"])): float(m["compute"]) for m in jobs.LOCAL_RE.finditer(text)}
    # from step 11 on rank 1 sleeps 250 ms more per step; rank 0 waits for it in all_reduce
    assert compute[(1, 40)] - compute[(0, 40)] > 150, compute
    assert abs(compute[(1, 10)] - compute[(0, 10)]) < 150, compute
    rates = [
        float(m) for m in re.findall(r"^0: \[rank0\]: step \d+/40 \| loss [\d.]+ \| ([\d.]+) samples/s", text, re.M)
    ]
    assert rates[-1] < rates[0] / 2, rates


# --- train.py on its own (one local process, no Slurm): bad input and resume ----------------------


def run_train(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TG_"))}
    return subprocess.run(
        [sys.executable, "-u", str(jobs.TRAIN_PY), "--step-time", "0", *args],
        env={**clean, "TG_JOB_DIR": str(tmp_path / "job"), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.integration
def test_unknown_fault_is_a_clear_error_without_traceback(tmp_path: Path) -> None:
    proc = run_train(tmp_path, "--steps", "5", TG_FAULT="meteor")
    assert proc.returncode == 2
    assert "train.py: error: TG_FAULT='meteor' is not one of " + ", ".join(jobs.FAULTS) in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.integration
def test_unreadable_checkpoint_is_a_clear_error_and_is_left_in_place(tmp_path: Path) -> None:
    checkpoint = tmp_path / "job" / "checkpoint.pt"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b"not a checkpoint")
    proc = run_train(tmp_path, "--steps", "5")
    assert proc.returncode == 2
    assert f"cannot read checkpoint {checkpoint}" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert checkpoint.read_bytes() == b"not a checkpoint", "never overwrite what we could not read"


@pytest.mark.integration
def test_a_second_run_resumes_where_the_first_stopped(tmp_path: Path) -> None:
    first = run_train(tmp_path, "--steps", "20", "--ckpt-every", "10")
    assert first.returncode == 0, first.stderr
    assert "saved checkpoint step=20" in first.stdout
    second = run_train(tmp_path, "--steps", "30", "--ckpt-every", "10", SLURM_RESTART_COUNT="1")
    assert second.returncode == 0, second.stderr
    assert "[rank0]: resumed from checkpoint step=20 (attempt 1)" in second.stdout
    steps = [int(m) for m in re.findall(r"^\[rank0\]: step (\d+)/30 ", second.stdout, re.M)]
    assert steps == [30], second.stdout


def start_rank(job_dir: Path, rank: int, log: Path, *args: str, **env: str) -> subprocess.Popen[bytes]:
    """One rank of a job launched as Slurm would (``SLURM_*`` task variables; 2 ranks unless ``env``
    says otherwise), without Slurm."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TG_"))}
    slurm = {"SLURM_JOB_ID": "1", "SLURM_RESTART_COUNT": "0", "SLURM_NTASKS": "2", "SLURM_PROCID": str(rank)}
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-u", str(jobs.TRAIN_PY), "--step-time", "0", "--log-every", "1", *args],
            env={**clean, **slurm, "TG_JOB_DIR": str(job_dir), "TG_PG_TIMEOUT": "60", **env},
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        )


@pytest.mark.integration
def test_two_clusters_running_the_same_job_id_at_once_do_not_share_a_rendezvous(tmp_path: Path) -> None:
    """Job ids restart at 1 on every fresh cluster, and several clusters share one host.

    Job 1 of "cluster A" hangs in a collective (so it holds its rendezvous for as long as the test
    wants); job 1 of "cluster B", in another directory, must still meet and complete. A port derived
    from the job id gave B the port A holds: EADDRINUSE, or B's rank 1 joining A's store.
    """
    hung = [start_rank(tmp_path / "a", rank, tmp_path / f"a{rank}.log", "--steps", "400",
                       TG_FAULT="hang", TG_FAULT_RANK="1", TG_FAULT_STEP="2") for rank in (0, 1)]
    started = list(hung)
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while "step 2: entering a blocking call" not in (tmp_path / "a1.log").read_text(errors="replace"):
            assert all(p.poll() is None for p in hung), (tmp_path / "a0.log").read_text(errors="replace")
            assert time.monotonic() < deadline, "job 1 of cluster A never reached its hang"
            time.sleep(0.2)
        second = [start_rank(tmp_path / "b", rank, tmp_path / f"b{rank}.log", "--steps", "5") for rank in (0, 1)]
        started += second
        codes = [p.wait(timeout=JOB_TIMEOUT) for p in second]
        logs = [(tmp_path / f"b{rank}.log").read_text(errors="replace") for rank in (0, 1)]
        assert codes == [0, 0], "\n".join(logs)
        assert "[rank0]: training complete: 5 steps" in logs[0]
        assert all(p.poll() is None for p in hung), "cluster A's job is untouched"
    finally:
        for p in started:
            p.kill()
            p.wait()


@pytest.mark.integration
def test_a_rank_on_its_way_to_exit_93_is_not_turned_into_a_kill_by_sigterm(tmp_path: Path) -> None:
    """srun --kill-on-bad-exit SIGTERMs the other ranks when the first one exits 93; one that had
    not exited yet died of it, and the job ended 143:0 instead of 93:0 (a race under load)."""
    rank = start_rank(tmp_path / "job", 0, tmp_path / "rank0.log", "--steps", "400", "--step-time", "0.05",
                      SLURM_NTASKS="1", TG_FAULT="exit93", TG_FAULT_STEP="60")
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while "[rank0]: step 10/400 " not in (tmp_path / "rank0.log").read_text(errors="replace"):
            assert rank.poll() is None, (tmp_path / "rank0.log").read_text(errors="replace")
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.2)
        rank.send_signal(signal.SIGTERM)  # what srun does once another rank has exited 93
        code = rank.wait(timeout=JOB_TIMEOUT)
    finally:
        rank.kill()
        rank.wait()
    text = (tmp_path / "rank0.log").read_text(errors="replace")
    assert code == jobs.DO_NOT_REQUEUE_EXIT, text
    assert "exiting with code 93 (do not requeue)" in text


def test_job_script_rejects_what_sbatch_cannot_hold(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="comment"):
        jobs.training_job_script(nodes=2, steps=10, comment='trainguard" --wrap=x', workdir=tmp_path)
    with pytest.raises(ValueError, match="fault must be one of"):
        jobs.training_job_script(nodes=2, steps=10, fault="meteor", workdir=tmp_path)
    with pytest.raises(ValueError, match="at least 1"):
        jobs.training_job_script(nodes=0, steps=10, workdir=tmp_path)
    script = jobs.training_job_script(nodes=3, steps=10, comment="trainguard policy=gpu", workdir=tmp_path)
    assert '#SBATCH --comment="trainguard policy=gpu"' in script.splitlines()
    assert "#SBATCH --nodes=3" in script.splitlines()
