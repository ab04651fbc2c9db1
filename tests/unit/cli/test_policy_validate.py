"""`trainguard policy validate FILE...`: the run loader's verdict offline, plus warnings on contradictions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.policy import lint, loader

REPO = Path(__file__).resolve().parents[3]

CONTRADICTORY = """\
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata:
  name: gpu-large
spec:
  mode: Action
  detection:
    hangTimeout: 1s
    settle: 5s
  exclusion:
    drainLemonNodes: true
    maxExcludedNodesPerJob: 0
  actions:
    allowed: [requeue]
  applicationErrorAction: stop
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_shipped_examples_are_valid_without_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    examples = sorted(str(p) for p in (REPO / "examples").glob("recoverypolicy-*.yaml"))
    assert examples
    assert main.main(["policy", "validate", "--strict", *examples]) == 0
    out = capsys.readouterr().out
    assert "warning" not in out and out.count(": ok: ") == len(examples)


def test_contradictions_are_warnings_and_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "p.yaml", CONTRADICTORY)
    assert main.main(["policy", "validate", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{path}: ok: gpu-large (Action)"
    fields = [line.split(": policy gpu-large: ", 1)[1].split(" ", 1)[0] for line in lines[1:]]
    assert fields == [
        "spec.applicationErrorAction",
        "spec.exclusion.drainLemonNodes",
        "spec.exclusion.maxExcludedNodesPerJob",
        "spec.detection.hangTimeout",
    ]
    assert "neither drainNode nor cordonNode" in lines[2]
    assert main.main(["policy", "validate", "--strict", str(path)]) == 1


def test_json_report_and_invalid_file_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _write(tmp_path, "good.yaml", CONTRADICTORY)
    bad = _write(tmp_path, "bad.yaml", "retries:\n  maxRetries: -1\n")
    broken = _write(tmp_path, "broken.yaml", "mode: [Action\n")
    assert main.main(["policy", "validate", "--format", "json", str(good), str(bad), str(broken),
                      str(tmp_path / "missing.yaml")]) == 2
    captured = capsys.readouterr()
    assert captured.err == ""
    reports = [json.loads(line) for line in captured.out.splitlines()]
    assert [(r["path"], r["valid"]) for r in reports] == [
        (str(good), True), (str(bad), False), (str(broken), False), (str(tmp_path / "missing.yaml"), False),
    ]
    assert reports[0]["policies"] == [{"name": "gpu-large", "mode": "Action"}]
    assert reports[0]["warnings"][0] == {
        "policy": "gpu-large", "field": "spec.applicationErrorAction",
        "message": "asks for stop, which is not in actions.allowed (requeue): it will not be done",
    }
    assert "spec.retries.maxRetries" in reports[1]["error"] and reports[1]["warnings"] == []
    assert "not valid YAML" in reports[2]["error"] and "\n" not in reports[2]["error"]
    assert "cannot read" in reports[3]["error"]


def test_a_name_defined_in_two_files_is_invalid_as_in_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = _write(tmp_path, "a.yaml", "mode: Monitor\n")  # a bare spec is the policy named default
    second = _write(tmp_path, "b.yaml", "mode: Action\n")
    with pytest.raises(loader.PolicyError):
        loader.load_files([first, second])
    assert main.main(["policy", "validate", str(first), str(second)]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{first}: ok: default (Monitor)"
    assert out[1].startswith(f"{second}: invalid: policy name 'default' is already defined in {first}")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"exclusion": {"drainLemonNodes": True}}, "spec.exclusion.drainLemonNodes"),
        ({"exclusion": {"drainLemonNodes": True, "lemonNodeThreshold": 1},
          "actions": {"allowed": ["requeue", "drainNode"]}}, "spec.exclusion.lemonNodeThreshold"),
        ({"exclusion": {"drainLemonNodes": True}, "actions": {"allowed": ["drainNode", "requeue"]},
          "blastRadius": {"maxDrainedShare": 0}}, "spec.exclusion.drainLemonNodes"),
        ({"actions": {"allowed": ["stop"]}, "applicationErrorAction": "stop"}, "spec.retries.maxRetries"),
        ({"detection": {"throughputDropAction": "requeue"}, "actions": {"allowed": ["stop"]},
          "retries": {"maxRetries": 0}, "applicationErrorAction": "stop"}, "spec.detection.throughputDropAction"),
        ({"mode": "Action", "blastRadius": {"maxActionsPerHour": 0}}, "spec.blastRadius.maxActionsPerHour"),
        ({"detection": {"hangTimeout": "1s", "settle": "1s"}}, "spec.detection.hangTimeout"),
        ({"exclusion": {"validation": {"command": ["/opt/check.sh"], "outputDir": "/shared/tg"}}},
         "spec.exclusion.validation"),
        ({"selector": {"namespaces": ["train"]}, "exclusion": {
            "drainLemonNodes": True, "validation": {"command": ["/opt/check.sh"], "outputDir": "/shared/tg"}},
          "actions": {"allowed": ["requeue", "cordonNode"]}}, "spec.exclusion.validation.image"),
    ],
)
def test_each_contradiction(spec: dict[str, object], field: str) -> None:
    policy = loader.parse_document(spec, "test")
    assert [f.field for f in lint.contradictions(policy)] == [field]


def test_the_default_policy_has_no_contradiction() -> None:
    assert lint.contradictions(loader.parse_document({}, "test")) == []
