"""End to end on real Slurm: the signal journal of a real failure replays exactly, and backtests.

A real training job (Xid 79 injected on rank 1) fails under ``trainguard run --mode monitor``.
Afterwards the runner's audit database must hold the decision's inputs in the signal journal, and
replaying them under the recorded policy must give back exactly the verdict and the advice in the
audit log (``tests.support.journal_replay``). ``trainguard backtest`` then replays the same journal
under the session's policy (nothing differs) and under a changed one (no retries: stop, not requeue).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e import harness
from tests.e2e.conftest import StartTrainguard
from tests.support import journal_replay
from tests.support.slurm import SlurmCluster
from trainguard.store import database

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

JOB_TIMEOUT = 180.0


async def _check(url: str) -> dict[str, int]:
    store = await database.open_store(url, readonly=True)
    try:
        return await journal_replay.check(store)
    finally:
        await store.close()


def _backtest(runner: harness.Trainguard, policy: Path, job_id: str) -> list[dict[str, object]]:
    proc = subprocess.run(
        [str(harness.TRAINGUARD), "backtest", "--policy", str(policy), "--db", runner.db_url, "--format", "json",
         "--all"], env=runner.cluster.env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
        check=False)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    return [r for r in rows if r.get("summary") or str(r["workload"]).endswith(f"/{job_id}")]


def test_a_real_failure_replays_exactly_and_backtests_under_a_changed_policy(
    slurm_cluster: SlurmCluster, start_trainguard: StartTrainguard, e2e_dir: Path
) -> None:
    runner, policy_name = start_trainguard("monitor", "journal")
    workdir = e2e_dir / "jobs"
    job_id, records = harness.xid_job_until(slurm_cluster, runner, workdir, job_name="e2e-journal", policy=policy_name,
                                            kind="advice", timeout=JOB_TIMEOUT)
    [advice] = harness.of_kind(records, "advice", 0)
    assert advice["payload"]["action"] == "requeue", harness.diagnosis(runner, workdir, job_id)

    counts = asyncio.run(_check(runner.db_url))
    assert counts["advice"] >= 1 and counts["audit_advice"] >= 1 and counts["audit_verdicts"] >= 1

    policy = Path(runner.argv[runner.argv.index("--policy") + 1])
    *same, summary = _backtest(runner, policy, job_id)
    assert [(r["recorded"], r["replayed"], r["differs"]) for r in same] == [("requeue", "requeue", False)]
    assert summary["summary"] is True

    stricter = e2e_dir / "stricter.yaml"
    stricter.write_text(policy.read_text() + "  retries:\n    maxRetries: 0\n")
    *changed, summary = _backtest(runner, stricter, job_id)
    assert [(r["recorded"], r["replayed"], r["stop_vs_retry"]) for r in changed] == [
        ("requeue", "stop", "requeue -> stop")]
    assert summary["removed_requeues"] >= 1
