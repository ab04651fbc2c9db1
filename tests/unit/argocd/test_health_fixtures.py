"""Argo CD health scripts against their fixtures (``health_test.yaml`` + ``testdata/``).

The testdata objects were written by the real operator on the real kube-apiserver
(``tests/e2e/kube/test_argocd_health.py`` captures them with ``TG_ARGOCD_WRITE_FIXTURES=1`` and
evaluates the same scripts live); this tier replays them without any server, in Lua 5.1.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support import argocd

pytestmark = pytest.mark.unit

CASES = [(kind, path, expected) for kind in ("RecoveryPolicy", "WorkloadRecovery")
         for path, expected in argocd.fixtures(kind)]


@pytest.mark.parametrize(("kind", "path", "expected"), CASES, ids=[f"{k}-{p.stem}" for k, p, _ in CASES])
def test_health_script_matches_its_fixture(kind: str, path: Path, expected: argocd.Health) -> None:
    obj = yaml.safe_load(path.read_text())
    assert obj["kind"] == kind
    assert argocd.evaluate(kind, obj) == expected


@pytest.mark.parametrize(("kind", "reached"), [
    ("RecoveryPolicy", {"Healthy", "Progressing", "Degraded"}),
    ("WorkloadRecovery", {"Healthy", "Progressing", "Degraded", "Suspended"}),
])
def test_fixtures_cover_every_state_the_kind_reaches(kind: str, reached: set[str]) -> None:
    """A policy is never Suspended: Monitor mode is in force as intended, so it is Healthy."""
    states = {expected.status for _, expected in argocd.fixtures(kind)}
    assert states == reached, states


def test_a_lua_5_2_construct_fails_in_the_interpreter_the_checks_use() -> None:
    """The interpreter is Lua 5.1 for real: ``goto`` (5.2+) is a syntax error there, as in gopher-lua."""
    from lupa import lua51

    runtime = lua51.LuaRuntime()
    with pytest.raises(lua51.LuaSyntaxError):
        runtime.execute("goto done\n::done::\nreturn 1")


def test_an_object_without_status_is_progressing() -> None:
    for kind in ("RecoveryPolicy", "WorkloadRecovery"):
        obj = {"apiVersion": "trainguard.dev/v1alpha1", "kind": kind, "metadata": {"name": "x", "generation": 1},
               "spec": {}}
        assert argocd.evaluate(kind, obj).status == "Progressing"


def test_argocd_cm_snippet_carries_the_scripts_unchanged() -> None:
    """deploy/argocd/argocd-cm-health.yaml is what users patch into argocd-cm: the same Lua, byte for byte."""
    snippet = yaml.safe_load((argocd.HEALTH_DIR.parent / "argocd-cm-health.yaml").read_text())
    data = snippet["data"]
    assert set(data) == {f"resource.customizations.health.trainguard.dev_{k}" for k in ("RecoveryPolicy",
                                                                                       "WorkloadRecovery")}
    for kind in ("RecoveryPolicy", "WorkloadRecovery"):
        assert data[f"resource.customizations.health.trainguard.dev_{kind}"] == argocd.script_path(kind).read_text()
