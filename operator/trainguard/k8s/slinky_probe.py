"""What ``trainguard doctor`` asks the apiserver about SchedMD's slurm-operator (Slinky).

Place in the loop: none; a read-only probe of the Kubernetes shell that ``cli/doctor.py`` runs when
``--slinky-namespace`` is set, beside the doctor's other checks (``doctor/``). It answers, before the
first lemon node is met, whether the Slinky path of ``k8s.slinky_nodes`` can work:

- ``slinky.crds``: the API group ``slinky.slurm.net`` is served with ``nodesets`` and ``controllers``
  (API discovery, which every authenticated identity may read). Without them there is no NodeSet,
  so no slurmd pod to map and no operator to turn a cordon into a drain: fail.
- ``slinky.operator``: slurm-operator's Deployment, found in every namespace the credentials may list
  by the label its Helm chart sets (``app.kubernetes.io/name=slurm-operator``) or by its usual name
  ``slurm-operator``. Not visible is a warning, not a failure: it may run where we cannot list
  (our shipped RBAC grants no Deployments), or outside Kubernetes.
- ``slinky.version``: the version from the Deployment's image tag, else its
  ``app.kubernetes.io/version`` label. The cordon -> drain sync (``syncCordon`` and the
  ``nodeset.slinky.slurm.net/node-cordon-reason`` annotation) first shipped in v1.0.0-rc1
  (slurm-operator ``internal/controller/nodeset/nodeset_sync.go``); before it our cordon would
  never reach Slurm: fail. Unparsable or unknown: warn.
- ``slinky.pods``: slurmd pods in the Slinky namespace, each with the pod-hostname label (the Slurm
  node name) and on a Kubernetes node that exists: the map ``k8s.slinky.discover`` builds.
- ``slinky.rbac``: a SelfSubjectAccessReview of each call the cordon makes (get, list, patch
  ``nodes``; list ``pods`` in the namespace): the rows of ``k8s.rbac`` feature ``slinky``.

Every call goes through ``client.ApiClient``, which bounds it in time; the caller bounds the whole
probe too (``doctor.report.guarded``). Findings are plain records: the CLI turns them into checks.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Final, Literal

from kubernetes_asyncio import client as k8s

from trainguard.k8s import client, rbac, slinky

GROUP: Final = "slinky.slurm.net"
REQUIRED_RESOURCES: Final = ("nodesets", "controllers")
"""NodeSets make the slurmd pods; the Controller connects slurm-operator to slurmctld."""
OPERATOR_NAME: Final = "slurm-operator"
OPERATOR_SELECTOR: Final = f"app.kubernetes.io/name={OPERATOR_NAME}"
"""The label slurm-operator's Helm chart puts on its Deployment (its webhook is ``slurm-operator-webhook``)."""
VERSION_LABEL: Final = "app.kubernetes.io/version"
FIRST_CORDON_SYNC: Final = "1.0.0-rc1"
"""The first slurm-operator release that drains a Slurm node when its Kubernetes node is cordoned."""
RBAC_FIX: Final = ("grant the slinky rules: kubectl apply -k manifests/slinky (ClusterRole trainguard-slinky-nodes; "
                   "trainguard-slinky-pods bound in the Slinky namespace), or the chart with slinky.enabled=true")
_VERSION: Final = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    """One result, the shape of a doctor check (``doctor.report.Check``)."""

    name: str
    status: Literal["ok", "warn", "fail"]
    message: str
    fix: str | None = None


# ---- versions (pure) -----------------------------------------------------------------------------
def parse_version(text: str) -> tuple[int, int, int, tuple[str, ...]] | None:
    """``v1.0.1`` / ``1.0.0-rc1`` -> (1, 0, 1, ()) / (1, 0, 0, ("rc1",)); None when not a version."""
    match = _VERSION.match(text.strip())
    if match is None:
        return None
    pre = tuple(match.group(4).split(".")) if match.group(4) else ()
    return int(match.group(1)), int(match.group(2)), int(match.group(3)), pre


def _order(version: tuple[int, int, int, tuple[str, ...]]) -> tuple[Any, ...]:
    """Semantic-version order: a pre-release sorts before its release, numeric parts as numbers."""
    major, minor, patch, pre = version
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre)
    return major, minor, patch, 0 if pre else 1, parts


def has_cordon_sync(version: tuple[int, int, int, tuple[str, ...]]) -> bool:
    first = parse_version(FIRST_CORDON_SYNC)
    assert first is not None
    return _order(version) >= _order(first)


def image_tag(image: str) -> str | None:
    """The tag of an image reference (``registry:5000/repo/name:tag@sha256:...`` -> ``tag``)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def image_name(image: str) -> str:
    """The last path element of an image reference, without tag or digest."""
    return image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]


def version_of(deployment: Mapping[str, Any]) -> tuple[str | None, str]:
    """(version text, where it came from) of a slurm-operator Deployment: the tag of its
    ``slurm-operator`` container image, else the ``app.kubernetes.io/version`` label."""
    containers = (((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    images = [str(c.get("image") or "") for c in containers]
    for image in sorted(images, key=lambda i: image_name(i) != OPERATOR_NAME):
        tag = image_tag(image)
        if tag and parse_version(tag) is not None:
            return tag, f"image {image}"
    label = ((deployment.get("metadata") or {}).get("labels") or {}).get(VERSION_LABEL)
    if label:
        return str(label), f"label {VERSION_LABEL}"
    tags = [t for t in (image_tag(i) for i in images) if t]
    return (tags[0], f"image {images[0]}") if tags else (None, "no image tag or version label")


def judge_version(where: str, deployment: Mapping[str, Any]) -> Finding:
    text, source = version_of(deployment)
    if text is None:
        return Finding("slinky.version", "warn", f"{where}: version unknown ({source})",
                       f"run a tagged slurm-operator image, {FIRST_CORDON_SYNC} or later")
    version = parse_version(text)
    if version is None:
        return Finding("slinky.version", "warn", f"{where}: version {text!r} ({source}) is not a version we can read",
                       f"check that it is slurm-operator {FIRST_CORDON_SYNC} or later")
    if not has_cordon_sync(version):
        return Finding("slinky.version", "fail", f"{where}: slurm-operator {text} ({source}) predates "
                       f"{FIRST_CORDON_SYNC}, the first release that drains the Slurm node of a cordoned Kubernetes "
                       "node: our cordon would never reach Slurm", f"upgrade slurm-operator to {FIRST_CORDON_SYNC} or "
                       "later (v1.x speaks slurmrestd v0.0.44, Slurm 25.11 or later)")
    return Finding("slinky.version", "ok", f"{where}: slurm-operator {text} ({source}) drains the Slurm node of a "
                   "cordoned Kubernetes node")


# ---- the probe -------------------------------------------------------------------------------------
async def probe(api: client.ApiClient, namespace: str) -> list[Finding]:
    """Every finding, in a stable order; API errors become findings, never exceptions."""
    crds, reachable = await _crds(api)
    if not reachable:
        return [crds]  # every other call would wait as long again for the same answer
    findings = [crds]
    findings.extend(await _operator(api))
    findings.append(await _pods(api, namespace))
    findings.append(await _rbac(api, namespace))
    return findings


async def _crds(api: client.ApiClient) -> tuple[Finding, bool]:
    """``slinky.crds``, and whether the apiserver answered at all."""
    fix = ("install slurm-operator's CRDs (its slurm-operator-crds chart) in this cluster, or point KUBECONFIG at "
           "the cluster that runs Slinky")
    try:
        groups = await k8s.ApisApi(api).get_api_versions()
        found = next((g for g in groups.groups or [] if g.name == GROUP), None)
        if found is None:
            return Finding("slinky.crds", "fail", f"API group {GROUP} is not served: slurm-operator's CRDs are not "
                           "installed, so there are no NodeSets to map and nothing drains a cordoned node", fix), True
        version = found.preferred_version.version if found.preferred_version else found.versions[0].version
        resources = await k8s.CustomObjectsApi(api).get_api_resources(GROUP, version)
    except client.API_ERRORS as exc:
        return Finding("slinky.crds", "fail", f"API discovery of {GROUP}: {error_text(exc)}",
                       "check that the apiserver is reachable with these credentials (KUBECONFIG), or raise "
                       "--check-timeout"), isinstance(exc, client.ApiException)
    served = sorted({r.name for r in resources.resources or [] if "/" not in r.name})
    missing = [r for r in REQUIRED_RESOURCES if r not in served]
    if missing:
        return Finding("slinky.crds", "fail", f"{GROUP}/{version} serves {', '.join(served) or 'nothing'}, not "
                       f"{', '.join(missing)}", fix), True
    return Finding("slinky.crds", "ok", f"{GROUP}/{version} serves {', '.join(served)}"), True


async def _operator(api: client.ApiClient) -> list[Finding]:
    """``slinky.operator`` and ``slinky.version`` from the Deployments found in all namespaces."""
    where = f"Deployments labelled {OPERATOR_SELECTOR} or named {OPERATOR_NAME}, in all namespaces"
    apps = k8s.AppsV1Api(api)
    try:
        found: dict[str, dict[str, Any]] = {}
        listed = [await apps.list_deployment_for_all_namespaces(label_selector=OPERATOR_SELECTOR),
                  await apps.list_deployment_for_all_namespaces(field_selector=f"metadata.name={OPERATOR_NAME}")]
        for answer in listed:
            for item in answer.items or []:
                deployment = client.to_dict(api, item)
                meta = deployment.get("metadata") or {}
                found[f"{meta.get('namespace')}/{meta.get('name')}"] = deployment
    except client.API_ERRORS as exc:
        unknown = Finding("slinky.version", "warn", "unknown: slurm-operator's Deployment is not visible",
                          f"run doctor with credentials that may list Deployments, or check that slurm-operator is "
                          f"{FIRST_CORDON_SYNC} or later")
        return [Finding("slinky.operator", "warn", f"cannot list {where}: {error_text(exc)}",
                        "run doctor with credentials that may list Deployments in all namespaces (e.g. an admin's "
                        "kubeconfig); the operator's own ServiceAccount is not granted them"), unknown]
    if not found:
        return [Finding("slinky.operator", "warn", f"no slurm-operator found among {where}: it may run where these "
                        "credentials cannot see, or not at all (then nothing drains a cordoned node)",
                        "install slurm-operator, or check that it runs"),
                Finding("slinky.version", "warn", "unknown: slurm-operator's Deployment was not found",
                        f"check that slurm-operator is {FIRST_CORDON_SYNC} or later")]
    verdicts = [judge_version(name, deployment) for name, deployment in sorted(found.items())]
    worst = min(verdicts, key=lambda f: ("fail", "warn", "ok").index(f.status))
    version = Finding("slinky.version", worst.status, "; ".join(f.message for f in verdicts), worst.fix)
    states = [f"{name} ({_replicas(deployment)})" for name, deployment in sorted(found.items())]
    running = any(_available(deployment) for deployment in found.values())
    if not running:
        return [Finding("slinky.operator", "warn", f"found {', '.join(states)} among {where}, none available: "
                        "until it runs, a cordon is not turned into a Slurm drain",
                        "check its pods: kubectl -n NAMESPACE describe deployment NAME"), version]
    return [Finding("slinky.operator", "ok", f"found {', '.join(states)} among {where}"), version]


def _available(deployment: Mapping[str, Any]) -> bool:
    return int((deployment.get("status") or {}).get("availableReplicas") or 0) > 0


def _replicas(deployment: Mapping[str, Any]) -> str:
    wanted = (deployment.get("spec") or {}).get("replicas")
    available = int((deployment.get("status") or {}).get("availableReplicas") or 0)
    return f"{available}/{1 if wanted is None else wanted} available"


async def _pods(api: client.ApiClient, namespace: str) -> Finding:
    """``slinky.pods``: the map Slurm node -> Kubernetes node the cordon needs, and the nodes behind it."""
    fix = (f"set --slinky-namespace to the namespace of the NodeSet's pods (now {namespace}); each needs the "
           f"label {slinky.POD_HOSTNAME_LABEL} and must be scheduled on a node")
    core = k8s.CoreV1Api(api)
    try:
        items = (await core.list_namespaced_pod(namespace, label_selector=slinky.SLURMD_SELECTOR)).items or []
        pods = [client.to_dict(api, pod) for pod in items]
        nodes = {str(n.metadata.name) for n in (await core.list_node()).items or [] if n.metadata}
    except client.API_ERRORS as exc:
        return Finding("slinky.pods", "fail", f"cannot list slurmd pods in {namespace} or the nodes: {error_text(exc)}",
                       RBAC_FIX if client.status_of(exc) == 403 else fix)
    if not pods:
        return Finding("slinky.pods", "fail", f"no slurmd pods ({slinky.SLURMD_SELECTOR}) in namespace {namespace}: "
                       "no Slurm node can be mapped to a Kubernetes node, so none can be cordoned", fix)
    unlabelled = [_name(p) for p in pods if not ((p.get("metadata") or {}).get("labels") or {}).get(
        slinky.POD_HOSTNAME_LABEL)]
    placements = [slinky.placement_of_pod(p) for p in pods]
    unplaced = sorted(p.pod for p in placements if p is not None and p.kube_node is None)
    orphans = sorted(f"{p.pod} on {p.kube_node}" for p in placements
                     if p is not None and p.kube_node is not None and p.kube_node not in nodes)
    mapped = sorted(f"{p.slurm_node}->{p.kube_node}" for p in placements
                    if p is not None and p.kube_node is not None and p.kube_node in nodes)
    problems = ([f"without label {slinky.POD_HOSTNAME_LABEL}: {', '.join(unlabelled)}"] if unlabelled else []) + \
        ([f"not scheduled: {', '.join(unplaced)}"] if unplaced else []) + \
        ([f"on a node that does not exist: {', '.join(orphans)}"] if orphans else [])
    summary = f"{len(mapped)} of {len(pods)} slurmd pods in {namespace} map a Slurm node to a Kubernetes node"
    sample = f" ({', '.join(mapped[:5])}{', ...' if len(mapped) > 5 else ''})" if mapped else ""
    if not mapped:
        return Finding("slinky.pods", "fail", f"{summary}: {'; '.join(problems)}", fix)
    if problems:
        return Finding("slinky.pods", "warn", f"{summary}{sample}; {'; '.join(problems)}", fix)
    return Finding("slinky.pods", "ok", summary + sample)


def _name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name") or "?")


async def _rbac(api: client.ApiClient, namespace: str) -> Finding:
    """``slinky.rbac``: may these credentials make every call of the cordon path (``rbac`` feature slinky)?"""
    wanted = [(rule.group, resource, verb, namespace if rule.scope == "slinky" else None)
              for rule in rbac.RULES if rule.feature == "slinky" for resource in rule.resources for verb in rule.verbs]
    authz = k8s.AuthorizationV1Api(api)
    denied = []
    try:
        for group, resource, verb, where in wanted:
            if not await may(authz, group, resource, verb, where):
                denied.append(f"{verb} {resource}" + (f" in {where}" if where else " (cluster)"))
    except client.API_ERRORS as exc:
        return Finding("slinky.rbac", "warn", "cannot ask the apiserver what these credentials may do: "
                       f"{error_text(exc)}", RBAC_FIX)
    asked = ", ".join(f"{verb} {resource}" for _g, resource, verb, _w in wanted)
    who = await user_of(api)
    if denied:
        return Finding("slinky.rbac", "fail", f"{who} may not {', '.join(denied)}: a lemon node's cordon "
                       "(k8s.slinky_nodes) would fail", RBAC_FIX)
    return Finding("slinky.rbac", "ok", f"{who} may {asked} (pods in namespace {namespace})")


async def may(authz: k8s.AuthorizationV1Api, group: str, resource: str, verb: str, namespace: str | None) -> bool:
    """Whether these credentials may ``verb`` ``resource`` (``name/subresource`` too) of ``group`` in
    ``namespace`` (None: cluster-wide), by a SelfSubjectAccessReview."""
    name, _, sub = resource.partition("/")
    review = await authz.create_self_subject_access_review(k8s.V1SelfSubjectAccessReview(
        spec=k8s.V1SelfSubjectAccessReviewSpec(resource_attributes=k8s.V1ResourceAttributes(
            group=group, resource=name, subresource=sub or None, verb=verb, namespace=namespace))))
    return bool(review.status and review.status.allowed)


async def user_of(api: client.ApiClient) -> str:
    """``user NAME`` of these credentials (a SelfSubjectReview), or ``these credentials`` when not told."""
    try:
        review = await k8s.AuthenticationV1Api(api).create_self_subject_review(k8s.V1SelfSubjectReview())
    except client.API_ERRORS:
        return "these credentials"
    name = review.status.user_info.username if review.status and review.status.user_info else None
    return f"user {name}" if name else "these credentials"


def error_text(exc: BaseException) -> str:
    return client.message_of(exc) if isinstance(exc, client.ApiException) else f"{type(exc).__name__}: {exc}"
