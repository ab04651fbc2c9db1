"""The permission table (trainguard.k8s.rbac) is exactly what the k8s modules call.

The calls are found by reading the modules' source: every ``<api>.get/list/create/patch/delete(RESOURCE, ...)``
(RESOURCE one of the ``Resource`` constants, ``subresource=`` included), every ``request("POST", PATH)``,
and every ``kopf.on.event(GROUP, VERSION, PLURAL)`` (kopf lists and watches what it serves). The module
decides the feature: slinky.py is Slinky's, lease.py is peering's, the rest is core. kopf's own
CRD scanning (all namespaces only) is checked through ``k8s/operator.configure``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import kopf
import pytest

from trainguard.k8s import api as api_mod
from trainguard.k8s import lease, operator, rbac, review

pytestmark = pytest.mark.unit

K8S = Path(operator.__file__).parent
VERBS = {"get": "get", "list": "list", "create": "create", "patch": "patch", "delete": "delete"}
FEATURE_OF_MODULE = {"slinky.py": "slinky", "lease.py": "peering"}
RESOURCES = {**{name: value for name, value in vars(api_mod).items() if isinstance(value, api_mod.Resource)},
             "LEASES": lease.LEASES}
POST_PATHS = {review.TOKEN_REVIEWS: ("authentication.k8s.io", "tokenreviews"),
              review.ACCESS_REVIEWS: ("authorization.k8s.io", "subjectaccessreviews")}


def _resource_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _constant(module: ast.Module, name: str) -> str | None:
    for node in module.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) and isinstance(node.value, ast.Constant):
                return str(node.value.value)
    return None


def called() -> set[tuple[str, str, str, str]]:
    """(feature, group, resource, verb) of every API call in the k8s modules (api.py defines them)."""
    out: set[tuple[str, str, str, str]] = set()
    for path in sorted(K8S.glob("*.py")):
        if path.name in ("api.py", "rbac.py"):
            continue
        feature = FEATURE_OF_MODULE.get(path.name, "core")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            method = node.func.attr
            if method in VERBS and node.args:
                name = _resource_name(node.args[0])
                if name not in RESOURCES:
                    continue
                resource = RESOURCES[name]
                plural = resource.plural
                for keyword in node.keywords:
                    if keyword.arg == "subresource" and isinstance(keyword.value, ast.Constant):
                        plural = f"{plural}/{keyword.value.value}"
                out.add((feature, resource.group, plural, VERBS[method]))
            elif method == "request" and len(node.args) >= 2 and isinstance(node.args[0], ast.Constant):
                path_name = _resource_name(node.args[1])
                target = {"TOKEN_REVIEWS": review.TOKEN_REVIEWS, "ACCESS_REVIEWS": review.ACCESS_REVIEWS}.get(
                    path_name or "")
                assert target is not None, f"{path.name}: request() to a path this test does not know"
                group, plural = POST_PATHS[target]
                out.add((feature, group, plural, {"POST": "create"}[str(node.args[0].value)]))
            elif method == "event" and _resource_name(node.func.value) == "on" and len(node.args) == 3:
                group = node.args[0]
                plural = node.args[2]
                assert isinstance(plural, ast.Constant)
                group_value = _constant(tree, group.id) if isinstance(group, ast.Name) else None
                assert group_value is not None
                out.update((feature, group_value, str(plural.value), verb) for verb in ("list", "watch"))
    return out


def table(features: set[str]) -> set[tuple[str, str, str, str]]:
    return {(rule.feature, rule.group, resource, verb) for rule in rbac.RULES if rule.feature in features
            for resource in rule.resources for verb in rule.verbs}


def test_scan_finds_the_calls_it_must() -> None:
    calls = called()
    # one of each kind of call, so that a broken scanner cannot pass by finding nothing
    assert ("core", "trainguard.dev", "workloadrecoveries", "create") in calls
    assert ("core", "trainguard.dev", "workloadrecoveries/status", "patch") in calls
    assert ("core", "trainguard.dev", "recoverypolicies", "watch") in calls
    assert ("core", "authorization.k8s.io", "subjectaccessreviews", "create") in calls
    assert ("slinky", "", "nodes", "patch") in calls
    assert ("peering", "coordination.k8s.io", "leases", "create") in calls


def test_table_is_exactly_what_the_code_calls() -> None:
    coded = set(rbac.FEATURES) - rbac.DECLARED_AHEAD - {"allNamespaces"}
    assert table(coded) == called()


def test_all_namespaces_feature_is_kopf_scanning() -> None:
    """kopf lists and watches CRDs only with scanning on, which the operator turns on only when
    serving every namespace (kopf never lists namespaces then: it serves all of them)."""
    for clusterwide in (True, False):
        settings = kopf.OperatorSettings()
        operator.configure(settings, SimpleNamespace(clusterwide=clusterwide))  # type: ignore[arg-type]
        assert settings.scanning.disabled is (not clusterwide)
    assert table({"allNamespaces"}) == {("allNamespaces", "apiextensions.k8s.io", "customresourcedefinitions", verb)
                                        for verb in ("list", "watch")}


def test_unused_verbs_of_the_old_role_are_gone() -> None:
    granted = rbac.granted(["core", "allNamespaces"])
    resources = {(group, resource) for _scope, group, resource, _verb in granted}
    assert ("", "nodes") not in resources  # without Slinky nothing patches nodes
    assert ("slinky.slurm.net", "nodesets") not in resources
    assert ("events.k8s.io", "events") not in resources
    assert ("", "namespaces") not in resources
    assert ("trainguard.dev", "recoverypolicies", "patch") not in {(g, r, v) for _s, g, r, v in granted}


def test_rules_for_merges_and_orders() -> None:
    rules = rbac.rules_for(["slinky", "kubernetes"])
    nodes = [rule for rule in rules["cluster"] if rule["resources"] == ["nodes"]]
    assert nodes == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]}]
    with pytest.raises(ValueError, match="unknown RBAC features"):
        rbac.rules_for(["everything"])
