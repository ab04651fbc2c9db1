"""End to end on real Slurm: the Monitor-mode scorecard scores what people did after each advice.

``trainguard run --mode monitor`` records a requeue advice (Xid 79 on rank 1's node) for three jobs.
Then a person (this test, with Slurm's own commands) acts as people do:

- job A: requeued held, the suspect node added to its excluded nodes, released (what the advice said);
- job B: not requeued, but its suspect node drained with an admin's reason;
- job C: ignored; it stays FAILED.

``trainguard scorecard --format json`` must score A ``agree`` (requeued excluding the suspect, by a
person), B ``agree`` (suspect drained by someone else, with the reason), C ``would-have-helped``
(the job stayed down), and summarise the policy as ready under a 3-advice rule.
B's and C's jobs are pinned to disjoint node pairs (and A kept off B's pair's rank-1 node), so the drain
of B's suspect never touches A's or C's suspect; the drain is undone at the end.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness
from tests.e2e.conftest import StartTrainguard
from tests.support import browser
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

JOB_TIMEOUT = 240.0
DRAIN_REASON = "admin: suspected bad GPU"


def _advised_node(runner: harness.Trainguard, job_id: str) -> str:
    records = harness.wait_audit(runner, job_id, lambda rs: bool(harness.of_kind(rs, "outcome", 0)),
                                 timeout=JOB_TIMEOUT, what="outcome of attempt 0")
    (advice,) = harness.of_kind(records, "advice", 0)
    assert (advice["payload"]["mode"], advice["payload"]["action"]) == ("Monitor", "requeue"), advice
    (verdict,) = harness.of_kind(records, "verdict", 0)
    (node,) = verdict["payload"]["nodes"]
    assert node in advice["payload"]["exclusions"], advice
    return str(node)


def _scorecard(cluster: SlurmCluster, runner: harness.Trainguard, *args: str) -> list[dict[str, Any]]:
    proc = subprocess.run([str(harness.TRAINGUARD), "scorecard", "--db", runner.db_url, "--scheduler", "slurm-local",
                           "--format", "json", *args], env=cluster.env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def _snapshot_of_drain(runner: harness.Trainguard, workload_suffix: str, reason: str, *, timeout: float) -> None:
    """Wait until the runner's scorecard watch wrote down the drain (a row of its store's snapshots)."""
    path = runner.db_url.split("///", 1)[1]
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            rows = db.execute("SELECT workload, nodes FROM scorecard_snapshots").fetchall()
        if any(str(w).endswith(workload_suffix) and reason in str(nodes) for w, nodes in rows):
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"no snapshot of the drain within {timeout:.0f} s: {rows}")
        time.sleep(0.5)


def _api_scorecard(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/api/v1/scorecard", timeout=60) as response:
        data: dict[str, Any] = json.load(response)
        return data


@pytest.mark.slow(
    reason="three real recoveries (a requeue, a drain, an ignored advice) and their outcomes, then the scorecard")
def test_scorecard_scores_a_requeue_a_drain_and_an_ignored_advice(
    slurm_cluster: SlurmCluster, start_trainguard: StartTrainguard, e2e_dir: Path, request: pytest.FixtureRequest,
) -> None:
    runner, policy = start_trainguard("monitor", "scorecard")
    workdir = e2e_dir / "jobs"
    opt_in = f"trainguard policy={policy}"
    settings: dict[str, Any] = {"nodes": 2, "steps": 60, "step_time": 0.1, "log_every": 5, "fault": "xid",
                                "fault_rank": 1, "fault_step": 15, "comment": opt_in}
    drained: str | None = None
    job_b = harness.submit(slurm_cluster, workdir, job_name="e2e-score-b", sbatch_options=["--nodelist=node3,node4"],
                           **settings)
    job_c = harness.submit(slurm_cluster, workdir, job_name="e2e-score-c", sbatch_options=["--nodelist=node1,node2"],
                           **settings)
    job_a = harness.submit(slurm_cluster, workdir, job_name="e2e-score-a", sbatch_options=["--exclude=node4"],
                           **settings)
    try:
        for job in (job_a, job_b, job_c):
            harness.wait_job(slurm_cluster, job, harness.is_final, timeout=JOB_TIMEOUT, what="final", runner=runner,
                             workdir=workdir)
        bad_a, bad_b, bad_c = (_advised_node(runner, job) for job in (job_a, job_b, job_c))
        assert (bad_b, bad_c) == ("node4", "node2")

        # A: what the advice said, done by a person
        excluded = sorted({"node4", bad_a})
        slurm_cluster.scontrol("requeuehold", job_a)
        slurm_cluster.scontrol("update", f"JobId={job_a}", f"ExcNodeList={','.join(excluded)}")
        slurm_cluster.scontrol("release", job_a)
        after_a = harness.wait_job(slurm_cluster, job_a, harness.final_and_restarted(1), timeout=JOB_TIMEOUT,
                                   what="completed after the person's requeue", runner=runner, workdir=workdir)
        assert after_a["JobState"] == "COMPLETED", harness.summary(after_a)
        # B: the suspect node drained by an admin; C: nothing
        drained = bad_b
        slurm_cluster.scontrol("update", f"NodeName={bad_b}", "State=DRAIN", f"Reason={DRAIN_REASON}")

        rows = _scorecard(slurm_cluster, runner, "--min-scored", "3")
        # The engine's watch writes the drain down; the admin then resumes the node: Slurm forgets the
        # drain, the scorecard (here through the API) still knows it.
        _snapshot_of_drain(runner, f"/{job_b}", DRAIN_REASON, timeout=90)
        slurm_cluster.scontrol("update", f"NodeName={bad_b}", "State=RESUME")
        drained = None
        card = _api_scorecard(runner.http_url)
    finally:
        if drained is not None:
            slurm_cluster.scontrol("update", f"NodeName={drained}", "State=RESUME")
        for job in (job_a, job_b, job_c):
            harness.cancel_if_active(slurm_cluster, job)

    by_job = {str(r["workload"]).rsplit("/", 1)[-1]: r for r in rows if not r.get("summary")}
    assert set(by_job) == {job_a, job_b, job_c}, rows
    for row in by_job.values():
        assert (row["attempt"], row["advice"], row["policy"]) == (0, "requeue", policy), row

    a, b, c = by_job[job_a], by_job[job_b], by_job[job_c]
    assert (a["score"], a["detail"], a["requeued_by"], a["nodes"]) == (
        "agree", "requeued-excluding-suspect", "person", [bad_a]), a
    assert (b["score"], b["detail"], b["requeued_by"]) == ("agree", "suspect-drained-by-other", "none"), b
    assert DRAIN_REASON in b["drained_by_other"][bad_b], b
    assert (c["score"], c["detail"], c["requeued_by"]) == ("would-have-helped", "ignored-job-stayed-down", "none"), c
    assert not any(r["harmful"] for r in by_job.values())

    (summary,) = [r for r in rows if r.get("summary")]
    assert (summary["policy"], summary["advice"], summary["scored"], summary["agree"],
            summary["would_have_helped"], summary["harmful"]) == (policy, 3, 3, 2, 1, 0), summary
    assert (summary["agreement_rate"], summary["ready_for_action"]) == (1.0, True), summary

    # --policy filters: another policy's name gives nothing
    assert _scorecard(slurm_cluster, runner, "--policy-name", "no-such-policy") == []

    # The API after the drain was resumed: the same scores, B's drain from the engine's snapshot
    api_rows = {str(r["workload"]).rsplit("/", 1)[-1]: r for r in card["items"]}
    assert {j: (r["score"], r["detail"]) for j, r in api_rows.items()} == {
        j: (r["score"], r["detail"]) for j, r in by_job.items()}, card
    assert DRAIN_REASON in api_rows[job_b]["drained_by_other"][bad_b]
    (api_summary,) = card["summaries"]
    assert (api_summary["scored"], api_summary["ready_for_action"]) == (3, False)  # default rule: 5 scored

    # The console's scorecard page shows the same, in a real Chromium (when one is installed)
    if browser.why_no_browser():
        return
    chromium = request.getfixturevalue("chromium")
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(runner.http_url + "/#/scorecard")
        page.wait_for_selector("#scorecard-advice tbody tr[data-score]")
        shown = {str(row.get_attribute("data-workload")).rsplit("/", 1)[-1]: row.get_attribute("data-score")
                 for row in page.locator("#scorecard-advice tbody tr[data-score]").all()}
        assert shown == {job_a: "agree", job_b: "agree", job_c: "would-have-helped"}, shown
        ready = page.locator(f"#scorecard-policies tbody tr[data-policy='{policy}'] td[data-ready]")
        assert ready.get_attribute("data-ready") == "false"
        assert "only 3 scored advice" in ready.inner_text()
        page.screenshot(path=str(request.getfixturevalue("artifacts_dir") / "scorecard.png"), full_page=True)
    finally:
        context.close()
    assert errors == []
