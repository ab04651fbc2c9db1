"""Slinky awareness: slurmd pod <-> Slurm node <-> Kubernetes node, and cordoning a suspect node.

Place in the loop: an isolation step of the Kubernetes shell, after the policy. In a Slinky
cluster (SchedMD's slurm-operator, API group ``slinky.slurm.net``) every Slurm node is a slurmd pod
of a NodeSet, running on a Kubernetes node. When an Action-mode advice names nodes to take out of
service (``drain_nodes``: lemon nodes) and the policy allows ``cordonNode``, the operator cordons
the *Kubernetes* node behind each of them, with the annotation
``nodeset.slinky.slurm.net/node-cordon-reason`` set in the same write: Slinky then drains the Slurm
node with our reason (slurm-operator ``internal/controller/nodeset/nodeset_sync.go`` ``syncCordon``;
cordon flows one way, Kubernetes -> Slurm).

The mapping has two sources (slurm-operator ``internal/controller/nodeset/utils/utils.go``
``GetSlurmNodeName`` and ``internal/utils/podinfo``):

- the slurmd pods: label ``nodeset.slinky.slurm.net/pod-hostname`` is the Slurm node name (else
  ``spec.hostname``, else the pod name; with ``hostNetwork`` the Kubernetes node name), and
  ``spec.nodeName`` the Kubernetes node;
- the Slurm node's ``comment``: JSON ``{"namespace","podName","node","nodeSetName","nodeSetUID"}``
  that Slinky writes; the most reliable, so it wins when both are known.

Ownership: we only undo what we did ourselves, so our reason starts with ``trainguard:``. A node
someone else cordoned is left alone; we only ever uncordon a node whose cordon reason is ours. We
patch Nodes only (never pods or NodeSets), with a merge patch: no finalizers, no other fields touched.
"""

from __future__ import annotations

import enum
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kubernetes_asyncio import client as k8s

from trainguard.k8s import client
from trainguard.schedulers import base

logger = logging.getLogger(__name__)

CORDON_REASON_ANNOTATION: Final = "nodeset.slinky.slurm.net/node-cordon-reason"
POD_HOSTNAME_LABEL: Final = "nodeset.slinky.slurm.net/pod-hostname"
SLURMD_SELECTOR: Final = "app.kubernetes.io/name=slurmd"
"""Label selector of Slinky's worker (slurmd) pods (``internal/builder/labels/labels.go``)."""
MAX_REASON: Final = 256
"""Slinky caps the drain reason it takes from the annotation at 256 characters."""


@dataclass(frozen=True)
class Placement:
    """Where one Slurm node lives in Kubernetes."""

    slurm_node: str
    namespace: str
    pod: str
    kube_node: str | None
    source: str
    """``comment`` (the Slurm node comment Slinky writes) or ``pod`` (the slurmd pod)."""


def slurm_node_of_pod(pod: Mapping[str, Any]) -> str | None:
    """The Slurm node name of a slurmd pod, as Slinky derives it; None for other pods."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    if labels.get("app.kubernetes.io/name") != "slurmd":
        return None
    spec = pod.get("spec") or {}
    name = labels.get(POD_HOSTNAME_LABEL)
    if not name and spec.get("hostNetwork"):
        name = spec.get("nodeName")
    name = name or spec.get("hostname") or metadata.get("name")
    return str(name) if name else None


def placement_of_pod(pod: Mapping[str, Any]) -> Placement | None:
    slurm_node = slurm_node_of_pod(pod)
    if slurm_node is None:
        return None
    metadata = pod.get("metadata") or {}
    kube_node = (pod.get("spec") or {}).get("nodeName")
    return Placement(slurm_node, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""),
                     str(kube_node) if kube_node else None, "pod")


def placement_of_comment(slurm_node: str, comment: str) -> Placement | None:
    """The placement Slinky wrote into a Slurm node's comment; None when the comment is not one."""
    try:
        info = json.loads(comment)
    except (ValueError, TypeError):
        return None
    if not isinstance(info, dict) or not info.get("podName") or not info.get("namespace"):
        return None
    kube_node = info.get("node")
    return Placement(slurm_node, str(info["namespace"]), str(info["podName"]),
                     str(kube_node) if kube_node else None, "comment")


def build_map(pods: Iterable[Mapping[str, Any]], comments: Mapping[str, str] | None = None) -> dict[str, Placement]:
    """Slurm node -> placement, from slurmd pods and Slurm node comments (comments win)."""
    result: dict[str, Placement] = {}
    for pod in pods:
        placement = placement_of_pod(pod)
        if placement is not None:
            result[placement.slurm_node] = placement
    for slurm_node, comment in (comments or {}).items():
        placement = placement_of_comment(slurm_node, comment)
        if placement is not None and (placement.kube_node or slurm_node not in result):
            result[slurm_node] = placement
    return result


def cordon_reason(slurm_node: str, why: str) -> str:
    """Our reason text: tagged, one line, within Slinky's bound."""
    text = re.sub(r"\s+", " ", f"{base.OUR_REASON_PREFIX} {why} (Slurm node {slurm_node})").strip()
    return text[:MAX_REASON]


def is_ours(node: Mapping[str, Any]) -> bool:
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(CORDON_REASON_ANNOTATION, "")).startswith(base.OUR_REASON_PREFIX)


def is_cordoned(node: Mapping[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


class Result(enum.StrEnum):
    """What a cordon or uncordon call found and did."""

    DONE = "done"
    ALREADY = "already"
    """The node was already in the desired state by our hand."""
    NOT_OURS = "not-ours"
    """Someone else cordoned it (or it carries another reason): left alone."""


def cordon_patch(reason: str, resource_version: str | None) -> dict[str, Any]:
    """Reason and cordon in ONE write, so Slinky never sees the cordon without our reason."""
    patch: dict[str, Any] = {
        "metadata": {"annotations": {CORDON_REASON_ANNOTATION: reason}},
        "spec": {"unschedulable": True},
    }
    if resource_version:
        patch["metadata"]["resourceVersion"] = resource_version
    return patch


def uncordon_patch(resource_version: str | None) -> dict[str, Any]:
    patch: dict[str, Any] = {"metadata": {"annotations": {CORDON_REASON_ANNOTATION: None}},
                             "spec": {"unschedulable": None}}
    if resource_version:
        patch["metadata"]["resourceVersion"] = resource_version
    return patch


async def _node(api: client.ApiClient, kube_node: str) -> dict[str, Any]:
    return client.to_dict(api, await k8s.CoreV1Api(api).read_node(kube_node))


async def cordon(api: client.ApiClient, kube_node: str, reason: str) -> Result:
    """Observe, compare, act, verify: cordon ``kube_node`` with our reason unless someone else did."""
    node = await _node(api, kube_node)
    if is_cordoned(node):
        return Result.ALREADY if is_ours(node) else Result.NOT_OURS
    version = (node.get("metadata") or {}).get("resourceVersion")
    await client.merge_patch(k8s.CoreV1Api(api).patch_node, kube_node, body=cordon_patch(reason, version))
    after = await _node(api, kube_node)
    if not (is_cordoned(after) and is_ours(after)):
        raise client.verification_failed(409, f"NotVerified: node {kube_node} is not cordoned by us after the patch")
    logger.info("cordoned Kubernetes node %s: %s", kube_node, reason)
    return Result.DONE


async def uncordon(api: client.ApiClient, kube_node: str) -> Result:
    """Undo our cordon only: a node cordoned by someone else stays as it is."""
    node = await _node(api, kube_node)
    if not is_ours(node):
        return Result.NOT_OURS if is_cordoned(node) else Result.ALREADY
    version = (node.get("metadata") or {}).get("resourceVersion")
    await client.merge_patch(k8s.CoreV1Api(api).patch_node, kube_node, body=uncordon_patch(version))
    logger.info("uncordoned Kubernetes node %s", kube_node)
    return Result.DONE


async def discover(api: client.ApiClient, namespace: str) -> dict[str, Placement]:
    """The map from the slurmd pods of a Slinky namespace (needs get/list on pods there)."""
    pods = await k8s.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=SLURMD_SELECTOR)
    return build_map(client.to_dict(api, pod) for pod in pods.items or [])
