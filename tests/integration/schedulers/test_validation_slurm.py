"""The Slurm building blocks of validation before return, on the real local cluster: our reservation of a
node we drained keeps a user's job off it while the site's check (a script that passes or fails on
command, submitted as argv, no shell of ours) runs pinned to the node inside it; the check's exit code and
output are read back; the reservation is deleted (twice is fine) and only then the user's job runs.

These are the scheduler steps (``act.ports.NodeValidator``); the undrain sweep runs them in
``test_validation_lifecycle_slurm.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support import slurm
from trainguard.schedulers import base, runner, slurm_commands, slurm_local

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

CHECK = """#!/bin/sh
# the site's check, as a test double of dcgmi diag: prints its verdict, exits with the code it is given
echo "check on $(hostname -s 2>/dev/null || echo node): $1"
exit "$2"
"""


@pytest.mark.parametrize(("verdict", "code", "state"), [("pass", "0", "COMPLETED"), ("fail", "3", "FAILED")])
async def test_a_check_runs_pinned_in_our_reservation_and_user_jobs_wait_until_it_is_deleted(
        slurm_cluster: slurm.SlurmCluster, tmp_path: Path, verdict: str, code: str, state: str) -> None:
    node = slurm_cluster.nodes[-1]
    scheduler = slurm_local.SlurmCommandScheduler(runner.LocalRunner(env=slurm_cluster.client_env))
    check = slurm_cluster.jobs_dir / f"check-{verdict}.sh"
    check.write_text(CHECK)
    check.chmod(0o755)
    name = ""
    try:
        await scheduler.drain_node(node, "suspect node (test)")
        name = await scheduler.reserve_node(node, 10)
        assert name == f"trainguard-validate-{node}" == await scheduler.reserve_node(node, 10)  # ours: made once
        await scheduler.resume_node(node)  # a drained node runs no job, not even ours: the reservation guards it
        user_job = slurm_cluster.submit("#!/bin/sh\necho user\n", f"--nodelist={node}", "--time=2")
        job = await scheduler.submit_check(node, [str(check), verdict, code], tag=f"t{verdict}", minutes=2,
                                           output_dir=str(slurm_cluster.jobs_dir))
        assert await scheduler.find_check(f"t{verdict}") == job
        done = slurm_cluster.wait_for(job, state, timeout=60)
        assert done["NodeList"] == node and done["Reservation"] == name
        assert done["ExitCode"].startswith(f"{code}:")
        status = await scheduler.check_status(job)
        assert (status.phase.value, status.exit_code) == ("passed" if code == "0" else "failed", int(code))
        assert f": {verdict}" in status.output_tail
        output = slurm_cluster.jobs_dir / f"trainguard-validate-{node}-{job}.out"
        assert status.output_tail == await asyncio.to_thread(output.read_text)
        assert slurm_cluster.show(user_job)["JobState"] == "PENDING"  # kept off while we validate

        await scheduler.delete_reservation(name)
        await scheduler.delete_reservation(name)  # already gone: success
        name = ""
        slurm_cluster.wait_for(user_job, "COMPLETED", timeout=60)
    finally:
        if name:
            await scheduler.delete_reservation(name)
        snap = next(n for n in await scheduler.list_nodes() if n.name == node)
        if snap.drained:
            slurm_cluster.scontrol("update", f"NodeName={node}", "State=RESUME")
        await scheduler.close()


def test_reservation_names_and_argv_refuse_what_is_not_ours() -> None:
    with pytest.raises(base.SchedulerError):
        slurm_commands.argv_delete_reservation("maintenance-window")
    with pytest.raises(base.SchedulerError):
        slurm_commands.argv_submit_check(["/x.sh"], reservation="trainguard-validate-n1", node="n1;rm", minutes=1,
                                         output="/tmp/o", tag="abc")
    argv = slurm_commands.argv_submit_check(["/opt/check.sh", "--level", "2"], reservation="trainguard-validate-n1",
                                            node="n1", minutes=5, output="/tmp/o", tag="abc")
    assert argv[0] == "sbatch" and argv[-3:] == ["/opt/check.sh", "--level", "2"]
    assert "--reservation=trainguard-validate-n1" in argv and "--nodelist=n1" in argv
