"""A key given twice in a policy is refused, naming the key and both lines (PyYAML alone keeps the last
one: ``mode: Monitor`` then ``mode: Action`` validated as Action), and ``policy lint`` warns when the
blast-radius limits are as good as off (``maxDrainedShare: 1.0`` with a very high ``maxActionsPerHour``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.policy import lint, loader

pytestmark = pytest.mark.unit

MONITOR_THEN_ACTION = """\
mode: Monitor
retries:
  maxRetries: 2
mode: Action
"""


def test_a_mode_given_twice_is_refused_naming_the_key_and_both_lines() -> None:
    with pytest.raises(loader.PolicyError) as raised:
        loader.parse_text(MONITOR_THEN_ACTION, "team.yaml")
    message = str(raised.value)
    assert message == ("team.yaml: duplicate key 'mode' at line 4 (first given at line 1): a mapping may give "
                       "a key once")


def test_a_duplicate_deep_inside_a_full_object_in_a_later_document_is_refused() -> None:
    text = """\
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: first}
spec: {mode: Monitor}
---
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: second}
spec:
  blastRadius:
    maxActionsPerHour: 5
    maxDrainedShare: 0.1
    maxActionsPerHour: 500
"""
    with pytest.raises(loader.PolicyError, match=r"duplicate key 'maxActionsPerHour' at line 13 \(first given at "
                       r"line 11\)"):
        loader.parse_text(text, "p.yaml")


def test_the_same_key_in_different_mappings_and_merge_keys_are_fine() -> None:
    text = """\
mode: Monitor
retries: &retries {maxRetries: 2}
detection:
  hangTimeout: 10m
exclusion:
  maxExcludedNodesPerJob: 2
"""
    policies = loader.parse_text(text, "ok.yaml")
    assert policies.names() == ["default"]
    from trainguard.model import yamlload

    merged = yamlload.load("base: &b {a: 1, b: 2}\nchild:\n  <<: *b\n  a: 3\n")
    assert merged["child"] == {"a": 3, "b": 2}


def test_policy_validate_reports_the_duplicate_as_an_invalid_file(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "team.yaml"
    path.write_text(MONITOR_THEN_ACTION)
    assert main.main(["policy", "validate", str(path)]) == 2
    out = capsys.readouterr().out
    assert out == f"{path}: invalid: duplicate key 'mode' at line 4 (first given at line 1): a mapping may give " \
                  "a key once\n"


def _spec(blast: str) -> str:
    return f"mode: Action\nactions:\n  allowed: [requeue, drainNode]\nblastRadius:\n{blast}"


def test_lint_warns_on_a_whole_partition_drainable_with_a_very_high_action_rate() -> None:
    policy = loader.parse_text(_spec("  maxDrainedShare: 1.0\n  maxActionsPerHour: 1000\n")).policies[0]
    found = [f for f in lint.contradictions(policy) if f.field == "spec.blastRadius.maxDrainedShare"]
    assert len(found) == 1
    assert "maxActionsPerHour 1000" in found[0].message and "whole partition" in found[0].message


@pytest.mark.parametrize("blast", [
    "  maxDrainedShare: 1.0\n  maxActionsPerHour: 20\n",
    "  maxDrainedShare: 0.5\n  maxActionsPerHour: 1000\n",
    "  maxDrainedShare: 0.1\n",
])
def test_lint_is_quiet_when_either_limit_still_limits(blast: str) -> None:
    policy = loader.parse_text(_spec(blast)).policies[0]
    assert [f for f in lint.contradictions(policy) if f.field == "spec.blastRadius.maxDrainedShare"] == []


def test_policy_lint_is_the_validate_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "wide.yaml"
    path.write_text(_spec("  maxDrainedShare: 1.0\n  maxActionsPerHour: 1000\n"))
    assert main.main(["policy", "lint", "--strict", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{path}: warning: policy default: spec.blastRadius.maxDrainedShare is 1 with maxActionsPerHour 1000" \
           in out
