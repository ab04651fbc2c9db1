"""End to end on real Slurm: ``/metrics`` of a real ``trainguard run`` counts what it recorded, and the
Grafana dashboard reads only metrics that process exports.

One real 2-node PyTorch job prints an Xid 79 line on one rank (the hardware-crash scenario of the
Monitor-mode tier); the runner (``--mode monitor``) records anomaly -> verdict -> advice ->
skipped steps -> outcome. Then ``/metrics`` is scraped over HTTP and checked against the audit
trail the same process wrote, and every PromQL expression of ``deploy/grafana/trainguard.json``
must name a sample the scrape contains.
"""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import harness
from tests.e2e.conftest import StartTrainguard
from tests.support import promql
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

JOB_TIMEOUT = 180.0
DASHBOARD = harness.REPO_ROOT / "deploy" / "grafana" / "trainguard.json"


def scrape(runner: harness.Trainguard) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(runner.http_url + "/metrics", timeout=30) as response:
        assert response.status == 200
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def test_metrics_of_a_real_runner_follow_its_audit_trail_and_feed_the_dashboard(
    slurm_cluster: SlurmCluster, start_trainguard: StartTrainguard, e2e_dir: Path
) -> None:
    runner, policy = start_trainguard("monitor", "metrics")
    workdir = e2e_dir / "jobs"
    job_id, records = harness.xid_job_until(slurm_cluster, runner, workdir, job_name="e2e-metrics", policy=policy,
                                            kind="outcome", timeout=JOB_TIMEOUT)

    samples = scrape(runner)
    verdict = harness.of_kind(records, "verdict", 0)[0]["payload"]
    assert total(samples, "trainguard_anomalies_total", category=verdict["category"],
                 attribution=verdict["attribution"]) >= 1, harness.diagnosis(runner, workdir, job_id)
    assert total(samples, "trainguard_advice_total", action="requeue", mode="Monitor") >= 1
    skipped = len(harness.of_kind(records, "action", 0))
    assert total(samples, "trainguard_actions_total", status="skipped", mode="Monitor") >= skipped >= 1
    assert total(samples, "trainguard_outcomes_total", disposition="Monitored", mode="Monitor") >= 1
    assert total(samples, "trainguard_detection_latency_seconds_count", symptom="crash") >= 1
    assert total(samples, "trainguard_decision_latency_seconds_count") >= 1
    assert total(samples, "trainguard_audit_write_seconds_count", kind="advice") >= 1
    assert total(samples, "trainguard_dependency_reachable", dependency="scheduler") == 1
    assert total(samples, "trainguard_dependency_reachable", dependency="store") == 1
    # No workload id, job id or node name ever becomes a label value.
    values = {v for (_, ls), _ in samples.items() for _, v in ls}
    workload = harness.of_kind(records, "anomaly", 0)[0]["workload"]
    assert not [v for v in values if v in (job_id, workload) or "/" in v or re.fullmatch(r"node\d+", v)], values

    exported = {name for name, _ in samples}
    missing = [f"{title}: {name}" for title, expr in promql.dashboard_expressions(DASHBOARD)
               for name in sorted(promql.metric_names(expr) - exported)]
    assert missing == []
