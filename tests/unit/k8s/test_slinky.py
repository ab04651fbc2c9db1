"""Slinky mapping (slurmd pod <-> Slurm node <-> Kubernetes node) and the cordon write (k8s/slinky.py).

The objects are shaped like the ones slurm-operator creates: a StatefulSet-mode NodeSet pod of the
Helm chart (release ``slurm``, nodeset key ``slinky``: pod ``slurm-worker-slinky-0``, hostname
``slinky-0``), a DaemonSet-mode pod, a hostNetwork pod, and the JSON Slinky writes into the Slurm
node comment.
"""

from __future__ import annotations

import json
from typing import Any

from trainguard.k8s import slinky


def slurmd_pod(name: str, kube_node: str | None, **spec: Any) -> dict[str, Any]:
    labels = {
        "app.kubernetes.io/name": "slurmd",
        "app.kubernetes.io/instance": "slurm-worker-slinky",
        "app.kubernetes.io/component": "worker",
        "slinky.slurm.net/cluster": "slurm",
        "nodeset.slinky.slurm.net/pod-name": name,
    }
    hostname_label = spec.pop("hostname_label", None)
    if hostname_label:
        labels[slinky.POD_HOSTNAME_LABEL] = hostname_label
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "slurm", "labels": labels,
                     "ownerReferences": [{"apiVersion": "slinky.slurm.net/v1beta1", "kind": "NodeSet",
                                          "name": "slurm-worker-slinky", "uid": "ns-uid", "controller": True}]},
        "spec": {"containers": [{"name": "slurmd", "image": "ghcr.io/slinkyproject/slurmd:25.11"}], **spec},
    }
    if kube_node:
        body["spec"]["nodeName"] = kube_node
    return body


def test_statefulset_pod_maps_by_its_pod_hostname_label() -> None:
    pod = slurmd_pod("slurm-worker-slinky-0", "gpu-node-a", hostname="slinky-0", hostname_label="slinky-0")
    placement = slinky.placement_of_pod(pod)
    assert placement == slinky.Placement("slinky-0", "slurm", "slurm-worker-slinky-0", "gpu-node-a", "pod")


def test_without_the_label_hostname_then_pod_name_then_host_network_node() -> None:
    assert slinky.slurm_node_of_pod(slurmd_pod("slurm-worker-slinky-1", "n1", hostname="slinky-1")) == "slinky-1"
    assert slinky.slurm_node_of_pod(slurmd_pod("slurm-worker-slinky-2", "n1")) == "slurm-worker-slinky-2"
    assert slinky.slurm_node_of_pod(slurmd_pod("slurm-worker-abcde", "gpu-07", hostNetwork=True)) == "gpu-07"


def test_other_pods_are_not_slurm_nodes() -> None:
    pod = slurmd_pod("x", "n1")
    pod["metadata"]["labels"]["app.kubernetes.io/name"] = "slurmctld"
    assert slinky.placement_of_pod(pod) is None


def test_node_comment_wins_over_a_pod_not_yet_scheduled() -> None:
    pending = slurmd_pod("slurm-worker-slinky-3", None, hostname_label="slinky-3")
    comment = json.dumps({"namespace": "slurm", "podName": "slurm-worker-slinky-3", "node": "gpu-node-c",
                          "nodeSetName": "slurm-worker-slinky", "nodeSetUID": "ns-uid"})
    mapping = slinky.build_map([pending], {"slinky-3": comment, "slinky-9": "owner=alice", "slinky-8": "{}"})
    assert mapping["slinky-3"] == slinky.Placement("slinky-3", "slurm", "slurm-worker-slinky-3", "gpu-node-c",
                                                   "comment")
    assert "slinky-9" not in mapping and "slinky-8" not in mapping


def test_cordon_reason_is_tagged_one_line_and_bounded() -> None:
    reason = slinky.cordon_reason("slinky-0", "lemon node of slurm/c/12\nXid 79 " + "x" * 400)
    assert reason.startswith("trainguard: lemon node of slurm/c/12 Xid 79")
    assert "\n" not in reason and len(reason) == slinky.MAX_REASON


def test_cordon_patch_sets_reason_and_cordon_in_one_write_guarded_by_resource_version() -> None:
    patch = slinky.cordon_patch("trainguard: x", "42")
    assert patch == {"metadata": {"annotations": {slinky.CORDON_REASON_ANNOTATION: "trainguard: x"},
                                  "resourceVersion": "42"},
                     "spec": {"unschedulable": True}}
    undo = slinky.uncordon_patch(None)
    assert undo == {"metadata": {"annotations": {slinky.CORDON_REASON_ANNOTATION: None}},
                    "spec": {"unschedulable": None}}


def test_ownership_is_read_from_the_reason_prefix() -> None:
    theirs = {"metadata": {"annotations": {slinky.CORDON_REASON_ANNOTATION: "maintenance by ops"}},
              "spec": {"unschedulable": True}}
    ours = {"metadata": {"annotations": {slinky.CORDON_REASON_ANNOTATION: "trainguard: lemon"}},
            "spec": {"unschedulable": True}}
    assert (slinky.is_cordoned(theirs), slinky.is_ours(theirs)) == (True, False)
    assert (slinky.is_cordoned(ours), slinky.is_ours(ours)) == (True, True)
    assert not slinky.is_cordoned({"metadata": {}, "spec": {}})
