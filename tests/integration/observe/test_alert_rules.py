"""The shipped alerting rules: checked and unit-tested by the real promtool, the same in the chart as in
deploy/, and one of them delivered by a real Alertmanager to a webhook receiver."""

from __future__ import annotations

import datetime
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import alertmanager as am
from tests.support import helm as helm_support
from trainguard.k8s import packaging

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "deploy" / "prometheus" / "trainguard-rules.yaml"
RULES_TEST = RULES.with_name("trainguard-rules.test.yaml")

pytestmark = [pytest.mark.integration]


def rules() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return loaded


def test_the_chart_copy_is_the_deploy_file() -> None:
    copy = REPO / "charts" / "trainguard" / "files" / "prometheus-rules.yaml"
    assert copy.read_text() == packaging.chart_files(REPO)["charts/trainguard/files/prometheus-rules.yaml"]
    assert yaml.safe_load(copy.read_text()) == rules()


def test_every_metric_a_rule_reads_is_exported() -> None:
    documented = (REPO / "docs" / "metrics.md").read_text() + (REPO / "docs" / "notifications.md").read_text()
    for rule in rules()["groups"][0]["rules"]:
        for name in re.findall(r"\btrainguard_[a-z_]+", rule["expr"]):
            assert f"`{name}`" in documented, f"{rule['alert']}: {name} is not a documented metric"


@pytest.mark.alertmanager
def test_promtool_checks_and_tests_the_rules() -> None:
    promtool = am.tools()["promtool"]
    for argv in (["check", "rules", str(RULES)], ["test", "rules", str(RULES_TEST)]):
        done = subprocess.run([promtool, *argv], capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 11 rules found" in subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True,
                                                         text=True, timeout=120, check=False).stdout


@pytest.mark.helm
def test_the_chart_prometheusrule_holds_the_same_rules(helm: helm_support.Helm) -> None:
    assert not [d for d in helm.template() if d["kind"] == "PrometheusRule"]  # off by default
    [rule] = [d for d in helm.template("--set", "prometheusRule.enabled=true", "--set",
                                       "prometheusRule.labels.release=kube-prometheus")
              if d["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["metadata"]["labels"]["release"] == \
        "kube-prometheus"
    assert rule["spec"] == {"groups": rules()["groups"]}


@pytest.mark.alertmanager
def test_an_alert_of_the_rules_reaches_a_receiver_through_alertmanager(alertmanager: am.Alertmanager) -> None:
    rule = next(r for r in rules()["groups"][0]["rules"] if r["alert"] == "TrainguardBreakerOpen")
    now = datetime.datetime.now(datetime.UTC)
    instance = f"trainguard-{now.timestamp():.0f}:8080"  # a new alert: not one Alertmanager notified already
    alertmanager.post_alerts([{
        "labels": {"alertname": rule["alert"], **rule["labels"], "instance": instance, "job": "tg"},
        "annotations": {k: v.replace("{{ $labels.instance }}", instance)
                        for k, v in rule["annotations"].items()},
        "startsAt": now.isoformat(), "endsAt": (now + datetime.timedelta(minutes=5)).isoformat(),
    }])
    body = alertmanager.wait_for("TrainguardBreakerOpen")
    assert body["status"] == "firing" and body["receiver"] == "hook"
    [alert] = body["alerts"]
    assert alert["labels"]["severity"] == "critical"
    assert alert["annotations"]["summary"] == f"The blast-radius breaker is open on {instance}"
