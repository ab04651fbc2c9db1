"""The API's effective modes follow the one rule (``act.switch.effective_mode``): a declared Action
acts only with the cluster switch on and, for ``GET /api/v1/actions``, nothing paused and the breaker
closed. Pure: the route modules' helpers over a stand-in engine, no socket, no store."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path
from types import SimpleNamespace

import pytest

from trainguard import health as health_mod
from trainguard.http import api, pause, policies
from trainguard.http.common import State
from trainguard.model import vocab
from trainguard.policy import loader
from trainguard.store import audit

pytestmark = pytest.mark.unit

POLICIES = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: default}
spec: {mode: Monitor}
---
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: fast}
spec: {mode: Action}
"""


def state_with(allow_action: bool, runtimes: dict[str, object] | None = None) -> State:
    engine = SimpleNamespace(policies=loader.parse_text(POLICIES), runtimes=runtimes or {})
    return State(api.Fixed(engine=engine), health_mod.Health(),  # type: ignore[arg-type]
                 allow_action=allow_action, policies_editable=True)


@pytest.mark.parametrize("allow_action", [True, False])
def test_policy_modes_follow_the_cluster_switch(allow_action: bool) -> None:
    state = state_with(allow_action)
    assert policies.action_policies(state) == (["fast"] if allow_action else [])
    assert policies.mode_of(state, "w", "fast") == ("action" if allow_action else "monitor")
    assert policies.mode_of(state, "w", "default") == "monitor"
    assert policies.mode_of(state, "w", "nope") == "unknown"


def test_a_tracked_workload_shows_the_mode_the_engine_resolved() -> None:
    """The runtime's spec already carries the engine's effective mode (and a per-workload override)."""
    fast = loader.parse_text(POLICIES).get("fast")
    assert fast is not None
    state = state_with(True, {"w": SimpleNamespace(spec=fast.spec.model_copy(update={"mode": vocab.Mode.MONITOR}))})
    assert policies.mode_of(state, "w", "fast") == "monitor"


def test_no_engine_no_modes() -> None:
    state = State(api.Fixed(), health_mod.Health(), allow_action=True, policies_editable=True)
    assert policies.action_policies(state) is None
    assert policies.mode_of(state, "w", "fast") == "unknown"


@pytest.mark.parametrize(("allow_action", "paused", "tripped"), list(itertools.product([True, False], repeat=3)))
def test_actions_act_only_with_the_switch_on_nothing_paused_and_the_breaker_closed(
        allow_action: bool, paused: bool, tripped: bool) -> None:
    record = audit.ControlRecord("actions-paused", {"paused": paused, "reason": "r"}, "alice", 1.0)
    breaker = audit.ControlRecord("actions-breaker", {"open": tripped, "reason": "cap"}, "", 1.0)
    view = pause.view(allow_action, record, breaker)
    assert view.acting is (allow_action and not paused and not tripped)
    assert view.switch is allow_action and view.paused is paused and bool(view.breaker) is tripped


def test_auth_and_login_do_not_import_each_other() -> None:
    """``Principal`` lives in ``http.principal``: ``login`` stores it, ``auth`` applies the sessions."""
    source = Path(pause.__file__).with_name("login.py").read_text()
    imported = {node.module for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)
                 for alias in node.names if node.module == "trainguard.http"}
    assert "trainguard.http.auth" not in imported and "auth" not in imported
