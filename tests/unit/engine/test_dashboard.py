"""The Grafana dashboard (``deploy/grafana/trainguard.json``) reads only metrics we really export.

The engine drives a hardware crash in Action mode (``scenario``: real store, catalog and matcher,
the in-memory scheduler), its health model is served by the real HTTP app on a free port, and
``/metrics`` is scraped over HTTP. Every PromQL expression of the dashboard is tokenized
(``tests.support.promql``, which also rejects malformed ones) and each metric name it selects
must be one of the scraped sample names (so ``_bucket``/``_sum``/``_count``/``_total`` are checked
exactly as a query would use them). The e2e tier repeats the check against a real
``trainguard run`` on Slurm (``tests/e2e/test_metrics.py``).
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import promql
from tests.unit.engine import scenario
from trainguard.http import app as http_app

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "trainguard.json"


def unknown_names(scraped: str) -> list[str]:
    """Dashboard queries naming a metric not in ``scraped`` (Prometheus text), as messages."""
    exported = {s.name for family in text_string_to_metric_families(scraped) for s in family.samples}
    missing = []
    for title, expr in promql.dashboard_expressions(DASHBOARD):
        for name in sorted(promql.metric_names(expr) - exported):
            missing.append(f"{title}: {name} in {expr}")
    return missing


async def test_every_dashboard_query_names_a_metric_the_engine_serves(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("20")
    h.write("20", *scenario.ranked(0, "iteration 1 loss 2.3"))
    await h.step()
    h.write("20", *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()

    server = http_app.Server(http_app.build_app(h.engine.health))
    await server.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session, session.get(server.url + "/metrics") as response:
            assert response.status == 200
            scraped = await response.text()
    finally:
        await server.stop()

    expressions = promql.dashboard_expressions(DASHBOARD)
    assert len(expressions) >= 15
    used = set().union(*(promql.metric_names(e) for _, e in expressions))
    assert "trainguard_anomalies_total" in used and "trainguard_detection_latency_seconds_bucket" in used
    assert unknown_names(scraped) == []


def test_a_misspelt_or_unexported_name_is_reported() -> None:
    scraped = "# TYPE trainguard_advice counter\ntrainguard_advice_total{action=\"requeue\"} 1.0\n"
    missing = unknown_names(scraped)
    assert any("trainguard_anomalies_total" in m for m in missing)
    assert not any(" trainguard_advice_total in" in m for m in missing)


@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (category) (increase(trainguard_anomalies_total{status!="intent", x=~"a|b"}[$__rate_interval]))',
     {"trainguard_anomalies_total"}),
    ("histogram_quantile(0.95, sum by (le) (rate(a_bucket[5m]))) / on (job) group_left (x) b_count offset 5m",
     {"a_bucket", "b_count"}),
    ("sum(x_total) or vector(0)", {"x_total"}),
])
def test_metric_names_are_told_from_labels_functions_and_keywords(expr: str, names: set[str]) -> None:
    assert promql.metric_names(expr) == names


@pytest.mark.parametrize("expr", ["sum(rate(x_total[5m])", "histogram_quantil(0.9, x)", "x_total{a=\"b\"", "x ? y"])
def test_malformed_expressions_are_rejected(expr: str) -> None:
    with pytest.raises(ValueError):
        promql.metric_names(expr)
