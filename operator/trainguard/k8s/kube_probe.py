"""What ``trainguard doctor`` asks the apiserver when the scheduler is ``kubernetes``.

Place in the loop: none; a read-only probe of the Kubernetes shell that ``cli/doctor.py`` runs when
``--scheduler`` / ``TRAINGUARD_SCHEDULER`` names ``kubernetes`` (alone or beside a Slurm spec, as the
chart passes it), with this process's credentials (in a pod its ServiceAccount, else ``$KUBECONFIG``):

- ``kubernetes.api``: the credentials load and the apiserver answers with its version. Unreachable,
  silent or refusing the credentials (401): fail, and nothing else is asked.
- ``kubernetes.rbac``: a SelfSubjectAccessReview of every permission of ``k8s.rbac`` (the one table
  the shipped manifests and the chart's Roles are generated from) for the features this operator
  runs with: ``core`` and ``kubernetes``, ``allNamespaces`` when serving every namespace, ``peering``
  with a Lease. Where each is asked (``Target``): ``cluster`` rules cluster-wide; ``served`` rules in
  each served namespace (every namespace at once when serving all); ``workload`` rules in the
  workload namespace. Denied: fail, naming the user, the verbs and resources and the manifest that
  grants them.
- ``kubernetes.crds``: our CRDs (RecoveryPolicy, WorkloadRecovery) served, else fail (the operator
  cannot start); the workload kinds of the adapter (JobSet, PyTorchJob) served, else a warning:
  workloads of a kind not served are not watched.

The served and workload namespaces are read from the environment the operator's Deployment sets
(``TRAINGUARD_NAMESPACE`` comma-separated or ``TRAINGUARD_ALL_NAMESPACES``,
``TRAINGUARD_WORKLOAD_NAMESPACE``, ``TRAINGUARD_PEERING``, ``POD_NAMESPACE``), with the operator's
defaults (``cli/config.OperatorSettings``): no namespace given, the pod's own namespace (else the
ServiceAccount's, else ``default``). Every call goes through ``client.ApiClient``, which bounds it by
its ``timeout_s`` (doctor's --check-timeout).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from kubernetes_asyncio import client as k8s

from trainguard.k8s import client, crds, rbac
from trainguard.k8s.kubejobs import jobset, pytorchjob
from trainguard.k8s.slinky_probe import Finding, error_text, may, user_of

SA_NAMESPACE_FILE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
OUR_RESOURCES: Final = ("recoverypolicies", "workloadrecoveries")
WORKLOAD_KINDS: Final = (jobset.KIND, pytorchjob.KIND)
GRANTED_BY: Final[Mapping[str, str]] = {
    "core": "manifests/base/rbac.yaml (ClusterRole trainguard-operator)",
    "allNamespaces": "manifests/base/rbac.yaml (ClusterRole trainguard-operator)",
    "kubernetes": "manifests/kubernetes/rbac.yaml (ClusterRole trainguard-kubernetes-workloads)",
    "peering": "the chart's Lease Role (charts/trainguard, replicas above 1)",
}
"""Where each feature's rules ship (``hack/gen-crds`` writes them from ``k8s.rbac``)."""
CHART_FIX: Final = ("with the chart: helm upgrade with kubernetes.enabled=true (its Roles come from the same table, "
                    "charts/trainguard/files/rbac.yaml)")


@dataclasses.dataclass(frozen=True)
class Target:
    """Where the operator's rules must hold, and which features it runs."""

    served: tuple[str, ...]
    """The served namespaces; empty: every namespace."""
    workload: str
    features: tuple[str, ...]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Target:
        own = env.get("POD_NAMESPACE") or env.get("TRAINGUARD_POD_NAMESPACE") or _sa_namespace() or "default"
        every = env.get("TRAINGUARD_ALL_NAMESPACES", "").strip().lower() in ("1", "true", "yes", "on")
        named = tuple(n.strip() for n in env.get("TRAINGUARD_NAMESPACE", "").split(",") if n.strip())
        served = () if every else (named or (own,))
        workload = env.get("TRAINGUARD_WORKLOAD_NAMESPACE") or (served[0] if served else own)
        features = ("core", "kubernetes") + (("allNamespaces",) if every else ()) + \
            (("peering",) if env.get("TRAINGUARD_PEERING") else ())
        return cls(served, workload, features)

    def asks(self) -> list[tuple[str, str, str, str | None, str]]:
        """(group, resource, verb, namespace or None for cluster-wide, feature) of every permission."""
        wanted: dict[tuple[str, str, str, str | None], str] = {}
        for rule in rbac.RULES:
            if rule.feature not in self.features or rule.scope == "slinky":
                continue
            places: tuple[str | None, ...] = (
                (None,) if rule.scope == "cluster" else (self.served or (None,)) if rule.scope == "served"
                else (self.workload,))
            for resource in rule.resources:
                for verb in rule.verbs:
                    for place in places:
                        wanted.setdefault((rule.group, resource, verb, place), rule.feature)
        return [(*key, feature) for key, feature in wanted.items()]


def _sa_namespace() -> str | None:
    try:
        return SA_NAMESPACE_FILE.read_text().strip() or None
    except OSError:
        return None


async def probe(api: client.ApiClient, target: Target) -> list[Finding]:
    """Every finding, in a stable order; API errors become findings, never exceptions."""
    found = await _api(api)
    if found.status == "fail":
        return [found]  # every other call would wait as long again for the same answer
    return [found, await _rbac(api, target), await _crds(api)]


async def _api(api: client.ApiClient) -> Finding:
    where = f"apiserver {api.configuration.host}"
    try:
        version = await k8s.VersionApi(api).get_code()
    except client.API_ERRORS as exc:
        fix = ("the credentials are refused: renew the token / kubeconfig user" if client.status_of(exc) == 401 else
               "check that the apiserver is reachable from here with these credentials (KUBECONFIG, or the pod's "
               "network policy), or raise --check-timeout")
        return Finding("kubernetes.api", "fail", f"{where}: {error_text(exc)}", fix)
    return Finding("kubernetes.api", "ok", f"{where}: Kubernetes {version.git_version}")


async def _rbac(api: client.ApiClient, target: Target) -> Finding:
    asks = target.asks()
    authz = k8s.AuthorizationV1Api(api)
    try:
        answers = await asyncio.gather(*(may(authz, g, r, v, ns) for g, r, v, ns, _f in asks))
    except client.API_ERRORS as exc:
        return Finding("kubernetes.rbac", "fail", f"cannot ask the apiserver what these credentials may do: "
                       f"{error_text(exc)}", "check the apiserver, or raise --check-timeout")
    denied: dict[str, list[str]] = {}
    features: list[str] = []
    for (group, resource, verb, namespace, feature), ok in zip(asks, answers, strict=True):
        if not ok:
            key = f"{resource}{'.' + group if group else ''} " + (f"in {namespace}" if namespace else "(cluster)")
            denied.setdefault(key, []).append(verb)
            features.append(feature)
    who = await user_of(api)
    places = ", ".join(target.served) if target.served else "every namespace"
    scope = f"features {', '.join(target.features)}; served: {places}; workload namespace: {target.workload}"
    if denied:
        missing = "; ".join(f"{','.join(verbs)} {key}" for key, verbs in denied.items())
        manifests = sorted({GRANTED_BY[f] for f in features})
        return Finding("kubernetes.rbac", "fail", f"{who} may not {missing} ({scope})",
                       f"grant them: kubectl apply -f {' and '.join(manifests)}; {CHART_FIX}")
    return Finding("kubernetes.rbac", "ok", f"{who} may make all {len(asks)} calls the operator needs ({scope})")


async def _crds(api: client.ApiClient) -> Finding:
    try:
        served = {g.name: {v.version for v in g.versions or []}
                  for g in (await k8s.ApisApi(api).get_api_versions()).groups or []}
        ours = await _resources(api, crds.GROUP, crds.VERSION) if crds.VERSION in served.get(crds.GROUP, ()) else set()
        kinds = {kind.kind: kind.version in served.get(kind.group, ())
                 and kind.plural in await _resources(api, kind.group, kind.version) for kind in WORKLOAD_KINDS}
    except client.API_ERRORS as exc:
        return Finding("kubernetes.crds", "fail", f"API discovery: {error_text(exc)}",
                       "check the apiserver, or raise --check-timeout")
    missing = [r for r in OUR_RESOURCES if r not in ours]
    watched = [k for k, ok in kinds.items() if ok]
    unwatched = [k for k, ok in kinds.items() if not ok]
    about = (f"{crds.GROUP}/{crds.VERSION} serves {', '.join(OUR_RESOURCES)}; workload kinds served: "
             f"{', '.join(watched) or 'none'}")
    if missing:
        return Finding("kubernetes.crds", "fail", f"{crds.GROUP}/{crds.VERSION} does not serve {', '.join(missing)}: "
                       "the operator cannot start", "install the CRDs: kubectl apply -k crds (or the chart)")
    if unwatched:
        return Finding("kubernetes.crds", "warn", f"{about}; not served: {', '.join(unwatched)}, so those workloads "
                       "are not watched", "install the JobSet / Kubeflow training-operator CRDs if you run them")
    return Finding("kubernetes.crds", "ok", about)


async def _resources(api: client.ApiClient, group: str, version: str) -> set[str]:
    listed = await k8s.CustomObjectsApi(api).get_api_resources(group, version)
    return {r.name for r in listed.resources or [] if "/" not in r.name}
