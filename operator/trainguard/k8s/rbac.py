"""The Kubernetes permissions the operator needs, feature by feature: the one source of its RBAC.

Place in the loop: packaging of the kopf shell, like ``k8s/crds.py``. Every API call the k8s modules
make is listed here once, with the feature that makes it and where the permission must hold;
``hack/gen-crds`` writes from this table the chart's rule file (``charts/trainguard/files/rbac.yaml``,
which the chart's templates turn into Roles per values file) and ``manifests/*/rbac.yaml``.
``tests/unit/k8s/test_rbac.py`` scans the k8s modules' API calls and fails when the table grants a
verb nothing calls or misses one that is called; the Helm tests render the chart per values file and
compare its Roles with ``rules_for`` of the features that file enables.

Features (one row set each; a mode of the chart is a set of features):

- ``core``: always. Our CRs in the served namespaces, Events on them, the HTTP API's reviews.
- ``allNamespaces``: serving every namespace. kopf then scans the cluster for the CRDs it serves
  (list + watch ``customresourcedefinitions``); with a fixed list of namespaces scanning is off
  (``k8s/operator/handlers.configure``) and kopf lists nothing cluster-wide.
- ``slinky``: cordoning Slinky nodes (get + patch ``nodes``) and mapping slurmd pods to nodes (list
  ``pods`` in the Slinky namespace only).
- ``peering``: several replicas, one holding the ``coordination.k8s.io`` Lease in the workload namespace.
- ``kubernetes``: ``--scheduler kubernetes`` (JobSets and PyTorchJobs: the adapter ``k8s/kubejobs/``,
  the pod-log source and the Node-condition evidence; the validation check Jobs in the operator's namespace).

Scopes (where a rule must hold): ``cluster`` (cluster-scoped resources: a ClusterRole with a
ClusterRoleBinding), ``served`` (the namespaces whose objects are served: a ClusterRoleBinding when
serving all of them, else one RoleBinding per namespace), ``slinky`` (the Slinky namespace's
RoleBinding), ``workload`` (a Role in the workload namespace, where the Lease lives).

To add a feature or a call: add a row here, run ``hack/gen-crds``, and (for a new feature) a values
switch in the chart that enables it (``charts/trainguard/templates/_helpers.tpl``, ``features``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Final

FEATURES: Final = ("core", "allNamespaces", "slinky", "peering", "kubernetes")
SCOPES: Final = ("cluster", "served", "slinky", "workload")
DECLARED_AHEAD: Final[frozenset[str]] = frozenset()
"""Features whose calls are made by code that is not in this package yet (the scan test skips them); none now."""


@dataclasses.dataclass(frozen=True)
class Rule:
    """One RBAC rule: these verbs on these resources of one API group, for one feature, in one scope."""

    feature: str
    scope: str
    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    why: str

    def as_policy_rule(self) -> dict[str, Any]:
        return {"apiGroups": [self.group], "resources": list(self.resources), "verbs": list(self.verbs)}


RULES: Final[tuple[Rule, ...]] = (
    # core ------------------------------------------------------------------------------------
    Rule("core", "served", "trainguard.dev", ("recoverypolicies",), ("list", "watch"),
         "kopf watches policies (on.event); the shell lists them at start (k8s/operator/shell.py)"),
    Rule("core", "served", "trainguard.dev", ("recoverypolicies/status",), ("patch",),
         "policy acceptance conditions (k8s/operator/reporting.py)"),
    Rule("core", "served", "trainguard.dev", ("workloadrecoveries",), ("get", "list", "watch", "create", "delete"),
         "one WorkloadRecovery per tracked job: created, re-read, listed for retention, deleted; kopf watches "
         "them for mode overrides (k8s/operator/recoveries.py, k8s/status_write.py)"),
    Rule("core", "served", "trainguard.dev", ("workloadrecoveries/status",), ("patch",),
         "the engine's view of each workload (k8s/status_write.py)"),
    Rule("core", "served", "", ("events",), ("create",),
         "Events on our CRs (k8s/events.py)"),
    Rule("core", "cluster", "authentication.k8s.io", ("tokenreviews",), ("create",),
         "the HTTP API: who holds a bearer token (k8s/review.py)"),
    Rule("core", "cluster", "authorization.k8s.io", ("subjectaccessreviews",), ("create",),
         "the HTTP API: read or write role from the caller's own RBAC (k8s/review.py)"),
    Rule("core", "workload", "", ("configmaps",), ("get",),
         "the runtime pause: the trainguard-control ConfigMap in the operator's namespace (k8s/control.py)"),
    # allNamespaces ---------------------------------------------------------------------------
    Rule("allNamespaces", "cluster", "apiextensions.k8s.io", ("customresourcedefinitions",), ("list", "watch"),
         "kopf's resource scanning, on only when serving every namespace (k8s/operator/handlers.configure)"),
    # slinky ----------------------------------------------------------------------------------
    Rule("slinky", "cluster", "", ("nodes",), ("get", "list", "patch"),
         "cordon a lemon node with Slinky's node-cordon-reason annotation, Action mode only (k8s/slinky.py); "
         "list them to see which Slurm nodes are cordoned (k8s/slinky_nodes.py)"),
    Rule("slinky", "slinky", "", ("pods",), ("list",),
         "slurmd pods map Slurm node names to Kubernetes nodes (k8s/slinky.py)"),
    # peering ---------------------------------------------------------------------------------
    Rule("peering", "workload", "coordination.k8s.io", ("leases",), ("get", "list", "create", "patch"),
         "one active replica: the Lease named by --peering (k8s/lease.py); with --shards a Lease per shard "
         "and the members' Leases, listed to count live replicas (k8s/shard_leases.py)"),
    # kubernetes (the JobSet / PyTorchJob adapter, pod logs, node conditions) ---------------------------------
    Rule("kubernetes", "served", "jobset.x-k8s.io", ("jobsets",), ("get", "list", "watch", "patch"),
         "JobSets annotated trainguard.dev/policy: discovered, watched, restarted or suspended"),
    Rule("kubernetes", "served", "kubeflow.org", ("pytorchjobs",), ("get", "list", "watch", "patch"),
         "PyTorchJobs annotated trainguard.dev/policy: discovered, watched, restarted or suspended"),
    Rule("kubernetes", "served", "", ("pods",), ("list", "watch"),
         "the workload's pods: placement and termination state"),
    Rule("kubernetes", "served", "", ("pods/log",), ("get",),
         "the workload's output, read from its pods' logs"),
    Rule("kubernetes", "cluster", "", ("nodes",), ("get", "list", "watch", "patch"),
         "node conditions as evidence; cordon a lemon node in Action mode"),
    Rule("kubernetes", "workload", "batch", ("jobs",), ("get", "create", "delete"),
         "validation before return: the check Job pinned to the node, in the operator's namespace "
         "(k8s/kubejobs/node_checks.py)"),
    Rule("kubernetes", "workload", "", ("pods",), ("list",),
         "validation before return: the check Job's pod, for its exit code (k8s/kubejobs/node_checks.py)"),
    Rule("kubernetes", "workload", "", ("pods/log",), ("get",),
         "validation before return: the tail of the check's log, the evidence (k8s/kubejobs/node_checks.py)"),
)


def rules_for(features: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """Scope -> merged PolicyRules of the given features (same group+resource merged, verbs in a
    fixed order); every scope is present, possibly empty."""
    wanted = set(features)
    unknown = wanted - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown RBAC features: {sorted(unknown)}")
    merged: dict[str, dict[tuple[str, str], list[str]]] = {scope: {} for scope in SCOPES}
    for rule in RULES:
        if rule.feature not in wanted:
            continue
        for resource in rule.resources:
            verbs = merged[rule.scope].setdefault((rule.group, resource), [])
            verbs.extend(verb for verb in rule.verbs if verb not in verbs)
    return {
        scope: [{"apiGroups": [group], "resources": [resource], "verbs": _ordered(verbs)}
                for (group, resource), verbs in sorted(entries.items())]
        for scope, entries in merged.items()
    }


VERB_ORDER: Final = ("get", "list", "watch", "create", "update", "patch", "delete")


def _ordered(verbs: Iterable[str]) -> list[str]:
    return sorted(set(verbs), key=VERB_ORDER.index)


def granted(features: Iterable[str]) -> set[tuple[str, str, str, str]]:
    """(scope, group, resource, verb) for every permission of the features: what tests compare."""
    return {
        (scope, rule["apiGroups"][0], rule["resources"][0], verb)
        for scope, rules in rules_for(features).items()
        for rule in rules
        for verb in rule["verbs"]
    }


def chart_rules() -> dict[str, Any]:
    """The chart's ``files/rbac.yaml``: feature -> scope -> rules (the templates merge the features
    a values file enables; the Helm tests check the merge equals ``rules_for``)."""
    table: dict[str, Any] = {}
    for feature in FEATURES:
        per_scope = {scope: rules for scope, rules in rules_for([feature]).items() if rules}
        table[feature] = per_scope
    return table
