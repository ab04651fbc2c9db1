"""hack/gen-crds writes every install path's CRDs and RBAC from one source each, and the copies in
the repository are what it writes: the chart's crds/ equal crds/, its rule file and manifests/*/rbac.yaml
equal the permission table's rendering."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from trainguard.k8s import crds, packaging, rbac

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


def test_repository_copies_are_up_to_date() -> None:
    assert packaging.main(["--root", str(REPO), "--check"]) == 0


def test_chart_crds_are_the_crds() -> None:
    for name, text in crds.render().items():
        if name != crds.KUSTOMIZATION_FILE:
            assert (REPO / "charts" / "trainguard" / "crds" / name).read_text() == text


def test_chart_rule_file_is_the_table() -> None:
    table = yaml.safe_load((REPO / "charts" / "trainguard" / "files" / "rbac.yaml").read_text())
    assert set(table) == set(rbac.FEATURES)
    for feature in rbac.FEATURES:
        assert table[feature] == {scope: rules for scope, rules in rbac.rules_for([feature]).items() if rules}


def test_check_finds_a_hand_edit_and_a_stale_file(tmp_path: Path) -> None:
    for part in ("crds", "charts", "manifests", "deploy"):  # deploy/: the alerting rules the chart copies
        shutil.copytree(REPO / part, tmp_path / part)
    assert packaging.main(["--root", str(tmp_path), "--check"]) == 0
    role = tmp_path / "manifests" / "base" / "rbac.yaml"
    role.write_text(role.read_text().replace("- watch\n", "- watch\n  - patch\n", 1))
    assert packaging.main(["--root", str(tmp_path), "--check"]) == 1
    assert packaging.main(["--root", str(tmp_path)]) == 0
    assert packaging.main(["--root", str(tmp_path), "--check"]) == 0
    (tmp_path / "charts" / "trainguard" / "crds" / "old.yaml").write_text("{}\n")
    assert packaging.main(["--root", str(tmp_path), "--check"]) == 1
    assert packaging.main(["--root", str(tmp_path)]) == 0
    assert not (tmp_path / "charts" / "trainguard" / "crds" / "old.yaml").exists()
    rules = tmp_path / "deploy" / "prometheus" / "trainguard-rules.yaml"
    rules.write_text(rules.read_text().replace("for: 2m", "for: 3m", 1))
    assert packaging.main(["--root", str(tmp_path), "--check"]) == 1  # the chart's copy is out of date
    assert packaging.main(["--root", str(tmp_path)]) == 0
    assert "for: 3m" in (tmp_path / "charts" / "trainguard" / "files" / "prometheus-rules.yaml").read_text()
