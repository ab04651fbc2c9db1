"""End to end on real Slurm, Action mode: a straggler rank -> the anomaly names it -> requeue without its node.

Synchronous data parallel on two nodes (tests/workloads/train.py, fault ``slow``): from step 60 of
the first attempt one rank sleeps 0.3 s more per step, so its own compute per iteration rises
fourfold, every rank's step slows (the other waits in all-reduce) and the job's rate falls to a
quarter. Under a policy with ``throughputDropAction: requeue`` the anomaly must name that rank, the
verdict its node, and the advice exclude it; the requeued attempt then runs without that node and
completes. Issue 23: with two ranks (too few for a peers' median) the anomaly named nobody, the
verdict said "no rule attributes it", and the advice read "requeue without the slow node" while
excluding nobody, so the job went back onto the slow node.

The second scenario slows every rank alike (a slowdown of the job itself): nobody can be named, and
the advice must say so instead of promising an exclusion. Both jobs run concurrently under one
``trainguard run``; every wait is bounded and every job is cancelled at the end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness
from tests.support.slurm import SlurmCluster, expand_hostlist

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

POLICY = harness.NO_LEMONS + "  detection:\n    throughputDropAction: requeue\n    throughputWindow: 20s\n"
"""Requeue on a throughput drop; a 20 s persistence window (40 job-rate lines at 0.5 s apart before the
slowdown, ~10 after it) keeps the scenario short while a one-off slow step never counts."""
RECOVERY_TIMEOUT = 300.0
"""Submit -> final state with one requeue, on two shared CPU cores."""
JOB: dict[str, Any] = {
    "nodes": 2,
    "steps": 250,
    "step_time": 0.1,
    "log_every": 5,
    "ckpt_every": 20,
    "fault": "slow",
    "fault_step": 60,
    "extra_env": {"TG_FAULT_SLOW_SECONDS": "0.3"},
}
"""0.1 s of compute per step, 0.4 s on a slowed rank from step 60 (first attempt only)."""


@dataclasses.dataclass
class Scenarios:
    cluster: SlurmCluster
    runner: harness.Trainguard
    workdir: Path
    ids: dict[str, str]

    def final(self, name: str) -> dict[str, str]:
        return harness.wait_job(self.cluster, self.ids[name], harness.final_and_restarted(1),
                                timeout=RECOVERY_TIMEOUT, what="final with Restarts>=1", runner=self.runner,
                                workdir=self.workdir)

    def audit(self, name: str) -> list[dict[str, Any]]:
        return self.runner.audit(self.ids[name])

    def output(self, name: str) -> str:
        return harness.output(self.workdir, self.ids[name])

    def why(self, name: str) -> str:
        return harness.diagnosis(self.runner, self.workdir, self.ids[name])


@pytest.fixture(scope="module")
def scenarios(slurm_cluster: SlurmCluster, e2e_dir: Path, request: pytest.FixtureRequest) -> Iterator[Scenarios]:
    directory = e2e_dir / "trainguard-straggler"
    directory.mkdir(parents=True, exist_ok=True)
    policy, name = harness.isolated_policy(directory, spec=POLICY)
    runner = harness.Trainguard(slurm_cluster, directory, mode="action", policy=policy).start()
    workdir = e2e_dir / "jobs"
    ids: dict[str, str] = {}
    try:
        opt_in = f"trainguard policy={name}"
        ids["one_rank"] = harness.submit(slurm_cluster, workdir, job_name="e2e-straggler", fault_rank=1,
                                         comment=opt_in, **JOB)
        ids["every_rank"] = harness.submit(slurm_cluster, workdir, job_name="e2e-slow-job", fault_rank="all",
                                           comment=opt_in, **JOB)
        yield Scenarios(slurm_cluster, runner, workdir, ids)
    finally:
        for job_id in ids.values():
            harness.cancel_if_active(slurm_cluster, job_id)
        code = runner.stop()
        if code != 0 or request.session.testsfailed:
            print(f"\n--- {runner.log_path} (exit {code}) ---\n{runner.log()}")


def _banners(text: str, attempt: str) -> dict[str, str]:
    """rank -> node of one attempt, from every rank's start banner."""
    return {m["rank"]: m["node"] for m in harness.BANNER_RE.finditer(text) if m["attempt"] == attempt}


def _payloads(records: list[dict[str, Any]], kind: str, attempt: int) -> list[dict[str, Any]]:
    return [r["payload"] for r in harness.of_kind(records, kind, attempt)]


@pytest.mark.slow(
    reason="the slow rank must lag long enough to be measured against its peers, then the requeued job completes")
def test_slow_rank_is_named_and_the_requeue_runs_without_its_node(scenarios: Scenarios) -> None:
    job = scenarios.final("one_rank")
    text = scenarios.output("one_rank")
    first = _banners(text, "0")
    slow = first["1"]
    assert (job["JobState"], job["Restarts"], job["ExitCode"]) == ("COMPLETED", "1", "0:0"), scenarios.why("one_rank")
    records = scenarios.audit("one_rank")

    anomalies = _payloads(records, "anomaly", 0)
    assert [(a["symptom"], a["category"]) for a in anomalies] == [("straggler", "throughput_drop")], anomalies
    assert (anomalies[0]["suspect_ranks"], anomalies[0]["suspect_nodes"]) == ([1], [slow]), anomalies[0]
    assert any(e["rank"] == 1 and e["node"] == slow and "local step" in e["text"] for e in anomalies[0]["evidence"])

    verdict = _payloads(records, "verdict", 0)[0]
    assert (verdict["category"], verdict["suspect_nodes"], verdict["suspect_ranks"]) == ("throughput_drop", [slow], [1])
    assert verdict["reasons"][0].startswith(f"throughput drop: rank 1 on {slow} fell behind"), verdict["reasons"]

    advice = _payloads(records, "advice", 0)
    assert [(a["action"], a["exclude_nodes"], a["mode"]) for a in advice] == [("requeue", [slow], "Action")], advice
    assert f"requeue without the slow node ({slow})" in advice[0]["reasons"][0], advice[0]["reasons"]

    assert slow in expand_hostlist(job["ExcNodeList"]), harness.summary(job)
    assert slow not in expand_hostlist(job["NodeList"]), harness.summary(job)
    second = _banners(text, "1")
    assert len(second) == 2 and slow not in second.values(), second
    assert not _payloads(records, "advice", 1), "the requeued attempt runs at full speed and is left alone"
    assert "training complete" in text


def test_a_slowdown_of_every_rank_names_no_node_and_the_advice_says_so(scenarios: Scenarios) -> None:
    job = scenarios.final("every_rank")
    assert (job["JobState"], job["Restarts"], job["ExitCode"]) == ("COMPLETED", "1", "0:0"), scenarios.why(
        "every_rank"
    )
    records = scenarios.audit("every_rank")
    anomaly = _payloads(records, "anomaly", 0)[0]
    assert (anomaly["category"], anomaly["suspect_ranks"], anomaly["suspect_nodes"]) == ("throughput_drop", [], [])
    verdict = _payloads(records, "verdict", 0)[0]
    assert verdict["suspect_nodes"] == [] and "no rank or node fell behind the others" in verdict["reasons"][0]
    advice = _payloads(records, "advice", 0)
    assert [(a["action"], a["exclude_nodes"]) for a in advice] == [("requeue", [])], advice
    reasons = advice[0]["reasons"]
    assert "no slow node could be named" in reasons[0] and "none is excluded" in reasons[0], reasons
    assert not any("without the slow node" in reason for reason in reasons), reasons
    assert job.get("ExcNodeList", "(null)") == "(null)", harness.summary(job)
