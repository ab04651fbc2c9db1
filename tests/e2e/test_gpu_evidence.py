"""End to end on real Slurm: the job says only ``CUDA error: unknown error``; Prometheus says Xid 79.

The job's output alone attributes such a crash ``unknown`` (and a requeue may land on the same
bad GPU). Here the hardware evidence exists only in Prometheus: a DCGM-style exporter per node
(tests/support/dcgm_exporter.py) reports Xid 79 on one GPU of one of the job's nodes, a real
Prometheus scrapes it, and ``trainguard run --prometheus-url`` must attribute the crash to that
node's hardware and requeue the job without it. The audit trail must list the sources used.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e import harness
from tests.support.prometheus import GpuTelemetry
from tests.support.slurm import SlurmCluster, expand_hostlist
from trainguard.signals import gpu_metrics

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.prometheus, pytest.mark.timeout(600)]

TIMEOUT = 240.0
BAD_GPU = 1


def _script(workdir: Path, go: Path, comment: str, *, crash: bool = True) -> str:
    """Two nodes; attempt 0 waits for the test's go, prints only the CUDA error and fails (or, with
    ``crash=False``, just finishes); later attempts succeed. No Xid, no host name, nothing
    hardware-like in the output."""
    return (
        "#!/bin/bash\n"
        "#SBATCH --job-name=tg-gpu-evidence\n"
        "#SBATCH --nodes=2\n"
        "#SBATCH --ntasks-per-node=1\n"
        "#SBATCH --partition=debug\n"
        "#SBATCH --requeue\n"
        "#SBATCH --open-mode=append\n"
        f"#SBATCH --output={workdir}/slurm-%j.out\n"
        f'#SBATCH --comment="{comment}"\n'
        'echo "attempt ${SLURM_RESTART_COUNT:-0} on ${SLURM_JOB_NODELIST}"\n'
        'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then\n'
        f"  for _ in $(seq 1200); do [ -e {go} ] && break; sleep 0.25; done\n"
        + ('  echo "RuntimeError: CUDA error: unknown error"\n  exit 1\n' if crash else "")
        + "fi\n"
        'echo "training complete"\n'
    )


def test_cuda_unknown_error_with_an_xid_only_in_prometheus_requeues_without_that_node(
    slurm_cluster: SlurmCluster, gpu_telemetry: GpuTelemetry, e2e_dir: Path,
) -> None:
    directory = e2e_dir / "gpu-evidence"
    directory.mkdir(parents=True, exist_ok=True)
    policy, name = harness.isolated_policy(directory, spec=harness.NO_LEMONS)
    env = {**slurm_cluster.env, "TRAINGUARD_PROMETHEUS_URL": gpu_telemetry.url("prometheus")}
    runner = harness.Trainguard(slurm_cluster, directory / "runner", mode="action", policy=policy, env=env).start()
    go = directory / f"go-{secrets.token_hex(4)}"
    script = directory / "job.sh"
    script.write_text(_script(directory, go, f"trainguard policy={name}"))
    for exporter in gpu_telemetry.exporters.values():  # no Xid left from other tests on the GPU we use
        exporter.set(BAD_GPU, gpu_metrics.XID, 0)
    job_id = _submit(slurm_cluster, directory, script)
    bad = "node1"
    try:
        job = harness.wait_job(slurm_cluster, job_id, harness.running_again(0), timeout=TIMEOUT, what="running",
                               runner=runner, workdir=directory)
        nodes = expand_hostlist(job["NodeList"])
        bad = nodes[-1]  # the Xid appears after the attempt started (StartTime opens the evidence window)
        _wait_tracked(runner, job_id)  # its output is read from the attempt's start
        for node in nodes:
            gpu_telemetry.wait_value("prometheus", node, gpu_metrics.XID, BAD_GPU, 0)
        gpu_telemetry.exporters[bad].set(BAD_GPU, gpu_metrics.XID, 79)
        gpu_telemetry.wait_value("prometheus", bad, gpu_metrics.XID, BAD_GPU, 79)
        go.touch()

        final = harness.wait_job(slurm_cluster, job_id, harness.final_and_restarted(1), timeout=TIMEOUT,
                                 what="final after one requeue", runner=runner, workdir=directory)
        why = harness.diagnosis(runner, directory, job_id)
        assert (final["JobState"], final["Restarts"]) == ("COMPLETED", "1"), why
        assert bad in expand_hostlist(final["ExcNodeList"]), why
        assert bad not in expand_hostlist(final["NodeList"]), why
        text = harness.output(directory, job_id)
        assert "CUDA error: unknown error" in text and "Xid" not in text, text

        records = runner.audit(job_id)
        attempt0 = [r for r in records if r["attempt"] == 0]
        crash = [i for i, r in enumerate(attempt0)
                 if r["kind"] == "anomaly" and r["payload"]["category"] == "cuda_error_other"]
        assert len(crash) == 1, why
        # the verdict of the crash (a metric anomaly raised while the job ran may come before it)
        verdict = next(r["payload"] for r in attempt0[crash[0]:] if r["kind"] == "verdict")
        assert (verdict["attribution"], verdict["nodes"]) == ("hardware", [bad]), why
        assert verdict["category"] == "gpu_xid_hardware"
        sources = {s["name"]: s["state"] for s in verdict["sources"]}
        assert sources == {"log": "used", "prometheus": "used", "slurm-local-nodes": "used"}, verdict["sources"]
        xid = [f for f in verdict["node_evidence"] if f["signal"] == gpu_metrics.XID]
        assert [(f["node"], f["gpu"], f["value"]) for f in xid] == [(bad, BAD_GPU, 79)], verdict
        requeues = [r["payload"] for r in harness.of_kind(records, "advice", 0) if r["payload"]["action"] == "requeue"]
        assert len(requeues) == 1 and requeues[0]["exclusions"] == [bad], why
    finally:
        harness.cancel_if_active(slurm_cluster, job_id)
        gpu_telemetry.exporters[bad].set(BAD_GPU, gpu_metrics.XID, 0)
        runner.stop()


def test_an_xid_in_prometheus_on_a_running_silent_job_requeues_it_without_that_node(
    slurm_cluster: SlurmCluster, gpu_telemetry: GpuTelemetry, e2e_dir: Path,
) -> None:
    """Detection from metrics alone: the job's log never shows anything wrong; the policy says
    ``detection.gpuMetricAction: requeue``, so the fault on a running job's node is acted on."""
    directory = e2e_dir / "gpu-detection"
    directory.mkdir(parents=True, exist_ok=True)
    spec = harness.NO_LEMONS + "  detection:\n    gpuMetricAction: requeue\n"
    policy, name = harness.isolated_policy(directory, spec=spec)
    env = {**slurm_cluster.env, "TRAINGUARD_PROMETHEUS_URL": gpu_telemetry.url("prometheus")}
    runner = harness.Trainguard(slurm_cluster, directory / "runner", mode="action", policy=policy, env=env).start()
    go = directory / f"go-{secrets.token_hex(4)}"
    script = directory / "job.sh"
    script.write_text(_script(directory, go, f"trainguard policy={name}", crash=False))
    gpu = 0
    for exporter in gpu_telemetry.exporters.values():
        exporter.set(gpu, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0)
    job_id = _submit(slurm_cluster, directory, script)
    bad = "node1"
    try:
        job = harness.wait_job(slurm_cluster, job_id, harness.running_again(0), timeout=TIMEOUT, what="running",
                               runner=runner, workdir=directory)
        bad = expand_hostlist(job["NodeList"])[0]
        _wait_tracked(runner, job_id)
        gpu_telemetry.wait_value("prometheus", bad, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu, 0)
        gpu_telemetry.exporters[bad].set(gpu, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 3)  # uncorrectable ECC errors

        final = harness.wait_job(slurm_cluster, job_id, harness.final_and_restarted(1), timeout=TIMEOUT,
                                 what="final after one requeue", runner=runner, workdir=directory)
        why = harness.diagnosis(runner, directory, job_id)
        assert (final["JobState"], final["Restarts"]) == ("COMPLETED", "1"), why
        assert bad in expand_hostlist(final["ExcNodeList"]), why
        assert not go.exists()  # nothing but the metrics ended attempt 0

        records = runner.audit(job_id)
        anomaly = harness.of_kind(records, "anomaly", 0)[0]["payload"]
        assert anomaly["category"] == "ecc_memory" and anomaly["suspect_nodes"] == [bad], why
        assert [e["pattern"] for e in anomaly["evidence"]] == ["gpu_metrics.fault"]
        verdict = harness.of_kind(records, "verdict", 0)[0]["payload"]
        assert (verdict["attribution"], verdict["nodes"]) == ("hardware", [bad]), why
        advice = harness.of_kind(records, "advice", 0)[0]["payload"]
        assert advice["action"] == "requeue" and advice["exclusions"] == [bad], why
    finally:
        go.touch()
        harness.cancel_if_active(slurm_cluster, job_id)
        gpu_telemetry.exporters[bad].set(gpu, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0)
        runner.stop()


@pytest.mark.slow(
    reason="the Xid reaches Prometheus only after a scrape interval past the crash, which the engine must wait for")
def test_an_xid_that_reaches_prometheus_after_the_crash_is_waited_for(
    slurm_cluster: SlurmCluster, gpu_telemetry: GpuTelemetry, e2e_dir: Path,
) -> None:
    """The realistic order: the job's log shows the crash first, DCGM's sample and the scrape come
    later. ``--prometheus-wait`` keeps the unknown crash's decision open until they can arrive."""
    directory = e2e_dir / "gpu-late"
    directory.mkdir(parents=True, exist_ok=True)
    policy, name = harness.isolated_policy(directory, spec=harness.NO_LEMONS)
    env = {**slurm_cluster.env, "TRAINGUARD_PROMETHEUS_URL": gpu_telemetry.url("prometheus"),
           "TRAINGUARD_PROMETHEUS_WAIT": "45"}
    runner = harness.Trainguard(slurm_cluster, directory / "runner", mode="action", policy=policy, env=env).start()
    go = directory / f"go-{secrets.token_hex(4)}"
    script = directory / "job.sh"
    script.write_text(_script(directory, go, f"trainguard policy={name}"))
    gpu = 0
    for exporter in gpu_telemetry.exporters.values():
        exporter.set(gpu, gpu_metrics.XID, 0)
    job_id = _submit(slurm_cluster, directory, script)
    bad = "node1"
    try:
        job = harness.wait_job(slurm_cluster, job_id, harness.running_again(0), timeout=TIMEOUT, what="running",
                               runner=runner, workdir=directory)
        bad = expand_hostlist(job["NodeList"])[0]
        _wait_tracked(runner, job_id)
        gpu_telemetry.wait_value("prometheus", bad, gpu_metrics.XID, gpu, 0)
        go.touch()
        harness.wait_audit(runner, job_id, lambda records: any(
            r["kind"] == "anomaly" and r["payload"]["category"] == "cuda_error_other" for r in records),
            timeout=TIMEOUT, what="the crash anomaly")
        gpu_telemetry.exporters[bad].set(gpu, gpu_metrics.XID, 79)  # the fault arrives late

        final = harness.wait_job(slurm_cluster, job_id, harness.final_and_restarted(1), timeout=TIMEOUT,
                                 what="final after one requeue", runner=runner, workdir=directory)
        why = harness.diagnosis(runner, directory, job_id)
        assert (final["JobState"], final["Restarts"]) == ("COMPLETED", "1"), why
        assert bad in expand_hostlist(final["ExcNodeList"]), why
        records = runner.audit(job_id)
        verdicts = [r["payload"] for r in harness.of_kind(records, "verdict", 0)]
        assert (verdicts[0]["attribution"], verdicts[0]["nodes"]) == ("hardware", [bad]), why
        advice = [r["payload"] for r in harness.of_kind(records, "advice", 0)]
        assert [(a["action"], a["exclusions"]) for a in advice] == [("requeue", [bad])], why
    finally:
        go.touch()
        harness.cancel_if_active(slurm_cluster, job_id)
        gpu_telemetry.exporters[bad].set(gpu, gpu_metrics.XID, 0)
        runner.stop()


def _submit(cluster: SlurmCluster, directory: Path, script: Path) -> str:
    env = {k: v for k, v in cluster.env.items() if k != "SLURM_JWT"}
    proc = subprocess.run(["sbatch", "--parsable", f"--chdir={directory}", str(script)], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, check=False)
    job_id = proc.stdout.strip().split(";", 1)[0]
    assert proc.returncode == 0 and job_id.isdigit(), proc.stderr
    cluster.submitted.append(job_id)
    return job_id


def _wait_tracked(runner: harness.Trainguard, job_id: str) -> None:
    """Wait until the runner tracks attempt 0 of the job (a job first seen already failed is judged
    by its exit state alone: output lines it cannot place are not charged to the attempt)."""
    text = f"(job {job_id}, attempt 0, "
    deadline = time.monotonic() + TIMEOUT
    while text not in runner.log():
        assert time.monotonic() < deadline, f"the runner never saw job {job_id} running:\n{runner.log()[-3000:]}"
        time.sleep(0.2)
