"""The permission table (trainguard.k8s.rbac) is exactly what the k8s modules call.

The calls are found by reading the modules' source (the k8s package and its sub-packages):

- every method of a kubernetes_asyncio API class named or called, ``<verb>_[namespaced_|cluster_]<kind>[_status]``
  (``read_node``, ``list_namespaced_pod``, ``create_namespaced_lease``, ``patch_namespaced_custom_object_status``,
  ``create_subject_access_review`` ...): the verb from the name, the resource from the kind; for custom
  objects the group and plural from the call's arguments, resolved in the module (``recovery.GROUP``);
  a method handed to ``client.merge_patch`` or to a watch is read from that call;
- every raw request path through the client's own ``call_api`` (``/api/v1/namespaces/{namespace}/pods``,
  ``.../log``), as used by the pod-log source;
- every ``kopf.on.event(GROUP, VERSION, PLURAL)`` (kopf lists and watches what it serves);
- a ``list`` of a module that runs watches (``kwatch.Watch``, or a raw path queried with ``watch``)
  is a watch as well.

The module decides the feature: slinky.py is Slinky's, lease.py and shard_leases.py are peering's,
the Kubernetes-workload modules (kubejobs/, pod logs, pods, node conditions) are ``kubernetes``, the
rest is core. kopf's own CRD scanning (all namespaces only) is checked through ``k8s/operator/handlers.configure``.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from trainguard.k8s import operator, rbac

pytestmark = pytest.mark.unit

K8S = Path(rbac.__file__).parent
FEATURE_OF_MODULE = {"slinky.py": "slinky", "slinky_nodes.py": "slinky", "slinky_probe.py": "slinky",
                     "lease.py": "peering",
                     "shard_leases.py": "peering",
                     "podlogs.py": "kubernetes", "pods.py": "kubernetes", "node_conditions.py": "kubernetes",
                     "kube_signals.py": "kubernetes"}
SKIPPED = {"rbac.py", "client.py"}
"""The table itself, and the client factory (it names no resource)."""
METHOD = re.compile(r"^(read|get|list|create|patch|replace|delete)_(?:namespaced_|cluster_)?([a-z_]+?)(_status)?$")
VERBS = {"read": "get", "get": "get", "list": "list", "create": "create", "patch": "patch", "replace": "update",
         "delete": "delete"}
KINDS = {"node": ("", "nodes"), "pod": ("", "pods"), "pod_log": ("", "pods/log"), "event": ("", "events"),
         "config_map": ("", "configmaps"), "namespaced_job": ("batch", "jobs"),
         "lease": ("coordination.k8s.io", "leases"), "token_review": ("authentication.k8s.io", "tokenreviews"),
         "subject_access_review": ("authorization.k8s.io", "subjectaccessreviews")}
NAMESPACED_ONLY = {"job"}
"""Kinds whose API methods are always ``_namespaced_`` (the batch Job): ``get_job``/``list_jobs`` of a
``Scheduler`` are not API calls."""
RAW_PATHS = {"/api/v1/namespaces/{namespace}/pods": ("", "pods", "list"),
             "/api/v1/namespaces/{namespace}/pods/{name}/log": ("", "pods/log", "get")}


def _feature(path: Path) -> str:
    if "kubejobs" in path.parts:
        return "kubernetes"
    return FEATURE_OF_MODULE.get(path.name, "core")


def _module(path: Path) -> Any:
    relative = path.relative_to(K8S.parent).with_suffix("")
    return importlib.import_module("trainguard." + ".".join(relative.parts))


def _value(module: Any, node: ast.expr) -> Any:
    """A constant argument: a literal, a module-level name or an attribute chain of one."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return getattr(module, node.id)
    if isinstance(node, ast.Attribute):
        return getattr(_value(module, node.value), node.attr)
    raise AssertionError(f"{module.__name__}: cannot resolve {ast.unparse(node)}")


def _custom(module: Any, method: str, args: list[ast.expr]) -> set[tuple[str, str]]:
    """(group, plural) of a custom-object call from its positional arguments. ``kind.group`` /
    ``kind.plural`` of a workload-kind variable (the adapter's calls are written once for every kind it
    serves) stand for each of the module's ``KINDS``."""
    plural_at = 3 if "_namespaced_" in method else 2
    assert len(args) > plural_at, f"{module.__name__}: {method} without group/plural arguments"
    group, plural = args[0], args[plural_at]
    if (isinstance(group, ast.Attribute) and isinstance(group.value, ast.Name) and group.value.id == "kind"
            and not hasattr(module, "kind")):
        return {(str(kind.group), str(kind.plural)) for kind in module.KINDS}
    return {(str(_value(module, group)), str(_value(module, plural)))}


def called() -> set[tuple[str, str, str, str]]:
    """(feature, group, resource, verb) of every API call in the k8s modules."""
    out: set[tuple[str, str, str, str]] = set()
    for path in sorted(K8S.rglob("*.py")):
        if path.name in SKIPPED:
            continue
        feature, source = _feature(path), path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        module = None
        watches = "Watch(" in source or '("watch", "true")' in source
        found: set[tuple[str, str, str]] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Attribute) and func.attr == "event" and _value_name(func.value) == "on" \
                        and len(node.args) == 3:
                    module = module or _module(path)
                    group, plural = str(_value(module, node.args[0])), str(_value(module, node.args[2]))
                    found.update({(group, plural, "list"), (group, plural, "watch")})
                    continue
                if node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in RAW_PATHS:
                    found.add(RAW_PATHS[str(node.args[0].value)])
                    continue
                # a method called, or handed as the first argument to a helper (merge_patch, a watch)
                target, args = None, list(node.args)
                if isinstance(func, ast.Attribute) and METHOD.match(func.attr):
                    target = func.attr
                elif args and isinstance(args[0], ast.Attribute) and METHOD.match(args[0].attr):
                    target, args = args[0].attr, args[1:]
                if target is None:
                    continue
                match = METHOD.match(target)
                assert match is not None
                verb, kind, status = VERBS[match.group(1)], match.group(2), match.group(3)
                if kind in NAMESPACED_ONLY and "_namespaced_" in target:
                    kind = "namespaced_" + kind
                if kind in ("custom_object",):
                    module = module or _module(path)
                    if not args:
                        continue  # a partial or reference without its arguments here: see below
                    pairs = _custom(module, target, args)
                elif kind in KINDS:
                    pairs = {KINDS[kind]}
                else:
                    continue  # not an API method (read_text, list_jobs ...)
                found.update((group, plural + ("/status" if status else ""), verb) for group, plural in pairs)
        for group, plural, verb in found:
            out.add((feature, group, plural, verb))
            if verb == "list" and watches:
                out.add((feature, group, plural, "watch"))
    return out


def _value_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


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
    calls = called()
    assert table(coded) - calls == set(), "granted but never called"
    assert calls - table(coded) == set(), "called but not granted"


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
