"""Loading policies from YAML: full objects, bare specs, several documents, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.model import vocab
from trainguard.policy import loader

TWO_POLICIES = """\
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata:
  name: gpu-large
  namespace: ml
spec:
  mode: Action
  retries:
    maxRetries: 5
  detection:
    hangTimeout: 45m
---
# a bare spec: named by selector.policyName, else "default"
retries:
  maxAttemptsWithoutCheckpoint: 3
"""


def test_file_with_object_and_bare_spec(tmp_path: Path) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(TWO_POLICIES, encoding="utf-8")
    policies = loader.load_file(path)
    assert policies.names() == ["gpu-large", "default"]
    large = policies.get("gpu-large")
    assert large is not None
    assert large.spec.mode == vocab.Mode.ACTION
    assert large.spec.detection.hang_timeout == 2700.0
    default = policies.get(None)
    assert default is not None
    assert default.spec.retries.max_attempts_without_checkpoint == 3
    assert default.spec.mode == vocab.Mode.MONITOR


def test_select_honours_partitions() -> None:
    policies = loader.parse_text("selector: {policyName: gpu, partitions: [gpu]}\n")
    chosen, _ = policies.select("gpu", partition="gpu")
    assert chosen is not None
    missing, why = policies.select("gpu", partition="debug")
    assert missing is None and "partition 'debug'" in why
    unknown, why = policies.select("cpu")
    assert unknown is None and "no RecoveryPolicy named 'cpu'" in why


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "retries: {maxRetries: 500}\n",
            "document 1: spec.retries.maxRetries: Input should be less than or equal to 100",
        ),
        ("kind: Deployment\nmetadata: {name: x}\n", "kind must be 'RecoveryPolicy'"),
        ("apiVersion: v1\nkind: RecoveryPolicy\nmetadata: {name: x}\n", "apiVersion"),
        ("kind: RecoveryPolicy\nmetadata: {name: Bad_Name}\n", "metadata.name"),
        (
            "kind: RecoveryPolicy\nmetadata: {name: x}\nspec: {detection: {hangTimeout: 30}}\n",
            "spec.detection.hangTimeout",
        ),
        ("- a\n- b\n", "expected a mapping"),
        ("retries: [\n", "not valid YAML"),
        ("", "no policy found"),
        ("mode: Monitor\n---\nmode: Action\n", "two policies are selected by the name 'default'"),
        ("selector: {policyName: 'Not Valid'}\n", "spec.selector.policyName"),
    ],
)
def test_errors_name_the_document_and_field(text: str, message: str) -> None:
    with pytest.raises(loader.PolicyError) as caught:
        loader.parse_text(text, "p.yaml")
    assert message in str(caught.value)
    assert str(caught.value).startswith("p.yaml")


def test_unreadable_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(loader.PolicyError, match="cannot read"):
        loader.load_file(tmp_path / "missing.yaml")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(loader.PolicyError, match="cannot read"):
        loader.load_file(binary)


def test_names_must_be_unique_across_files(tmp_path: Path) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("selector: {policyName: gpu}\n", encoding="utf-8")
    second.write_text("kind: RecoveryPolicy\nmetadata: {name: gpu}\n", encoding="utf-8")
    with pytest.raises(loader.PolicyError, match="'gpu'"):
        loader.load_files([first, second])
