"""Pods really run on the real node (issue 26): ``hack/local-kube.sh up --cluster --real-node``.

A pod pinned to ``real-node-1`` runs a real container (containerd + runc) from the imported busybox
image, as uid 4242 under a 64 MiB memory and 200m CPU limit, and prints what it sees; its log is read
through the API, which fetches it from the kubelet's log endpoint (no kwok Logs object exists for it).
What it printed proves the limits and the uid hold inside the container (the cgroup files runc wrote,
the process's own ids). A second pod allocates past its memory limit and is OOM-killed by the kernel
(exit 137). A claim of the default StorageClass is served by a directory on the node, and what a pod
writes there is read back by the next pod. The operator image starts as uid 10001 on a read-only
root filesystem.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.support import kube_cluster
from tests.support.real_node import BUSYBOX_IMAGE, OPERATOR_IMAGE, REAL_NODE_TAINT, STORAGE_CLASS, RealNode

pytestmark = [pytest.mark.integration, pytest.mark.kube_cluster, pytest.mark.real_node,
              pytest.mark.timeout(kube_cluster.BUILD_TIMEOUT_S)]

UID = 4242


def pod(name: str, node: str, script: str, *, memory: str = "64Mi", cpu: str = "200m",
        volume_claim: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": ["/bin/sh", "-c", script],
        "resources": {"limits": {"memory": memory, "cpu": cpu}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    spec: dict[str, Any] = {
        "nodeSelector": {"kubernetes.io/hostname": node}, "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": {"runAsUser": UID, "runAsGroup": UID, "runAsNonRoot": True,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
    }
    if volume_claim is not None:
        container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": volume_claim}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def finished(cluster: kube_cluster.SimCluster, namespace: str, name: str) -> dict[str, Any]:
    """The pod once its container has terminated (its terminated state)."""
    def probe() -> dict[str, Any] | None:
        obj = cluster.get("pod", name, namespace)
        statuses = (obj or {}).get("status", {}).get("containerStatuses") or []
        terminated = statuses[0].get("state", {}).get("terminated") if statuses else None
        return {"pod": obj, "terminated": terminated} if terminated else None
    return cluster.wait(f"pod {namespace}/{name} to terminate", probe, timeout=180)


@pytest.fixture
def namespace(real_node: RealNode) -> Any:
    name = real_node.cluster.create_namespace("real")
    try:
        yield name
    finally:
        real_node.cluster.delete_namespace(name, wait=120)


def test_a_pod_runs_in_a_real_container_with_its_limits_and_uid(real_node: RealNode, namespace: str) -> None:
    cluster = real_node.cluster
    script = ("echo \"real uid=$(id -u) gid=$(id -g) mem=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)"
              " cfs=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us)/$(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)\"")
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod("hello", real_node.name, script)))
    done = finished(cluster, namespace, "hello")
    assert done["terminated"]["exitCode"] == 0, done
    status = done["pod"]["status"]
    assert done["pod"]["spec"]["nodeName"] == real_node.name  # selected by name, no toleration needed
    assert "tolerations" not in pod("x", real_node.name, "true")["spec"]
    node = json.loads(cluster.kubectl("get", "node", real_node.name, "-o", "json"))
    ours = {t["effect"] for t in node["spec"].get("taints") or [] if t["key"] == REAL_NODE_TAINT}
    assert ours == {"PreferNoSchedule"}  # keeps other tests' pods off it, never a pod that selects it
    assert status["containerStatuses"][0]["containerID"].startswith("containerd://")
    assert status["podIP"].startswith("10.251."), status  # the node's CNI bridge, not kwok's
    log = cluster.pod_logs(namespace, "hello")
    match = re.search(r"^real uid=(\d+) gid=(\d+) mem=(\d+) cfs=(-?\d+)/(\d+)$", log, re.MULTILINE)
    assert match is not None, log
    uid, gid, memory, quota, period = (int(g) for g in match.groups())
    assert (uid, gid) == (UID, UID)
    assert memory == 64 * 1024 * 1024
    assert quota / period == pytest.approx(0.2)


def test_the_memory_limit_is_enforced_by_the_kernel(real_node: RealNode, namespace: str) -> None:
    cluster = real_node.cluster
    # tail keeps a whole line in memory: 200 MB of zeros without a newline, under a 32 MiB limit; the
    # kernel's OOM killer ends it (SIGKILL: 128 + 9) and the runtime records the OOM for the container.
    script = "head -c 200000000 /dev/zero | tail -n 1 > /dev/null; echo \"tail exited $?\""
    cluster.kubectl("apply", "-n", namespace, "-f", "-",
                    input=json.dumps(pod("hog", real_node.name, script, memory="32Mi")))
    done = finished(cluster, namespace, "hog")
    assert done["terminated"]["reason"] == "OOMKilled", done["terminated"]
    # The shell saw tail die of SIGKILL: it says "Killed", then echoes 137, unless the OOM killer,
    # with the cgroup still at its limit, ends the shell too before its echo (seen under load).
    lines = cluster.pod_logs(namespace, "hog").splitlines()
    assert lines and (lines[-1] == "tail exited 137" or lines[-1] == "Killed"), lines


def test_the_default_storage_class_serves_claims_on_the_node(real_node: RealNode, namespace: str) -> None:
    cluster = real_node.cluster
    classes = json.loads(cluster.kubectl("get", "storageclass", "-o", "json"))["items"]
    defaults = [c["metadata"]["name"] for c in classes
                if c["metadata"].get("annotations", {}).get("storageclass.kubernetes.io/is-default-class") == "true"]
    assert defaults == [STORAGE_CLASS]
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(claim))
    writer = pod("writer", real_node.name, "echo kept-$HOSTNAME > /data/f", volume_claim="data")
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(writer))
    assert finished(cluster, namespace, "writer")["terminated"]["exitCode"] == 0
    cluster.kubectl("apply", "-n", namespace, "-f", "-",
                    input=json.dumps(pod("reader", real_node.name, "cat /data/f", volume_claim="data")))
    assert finished(cluster, namespace, "reader")["terminated"]["exitCode"] == 0
    assert cluster.pod_logs(namespace, "reader").strip() == "kept-writer"
    bound = cluster.get("pvc", "data", namespace)
    assert bound is not None and bound["status"]["phase"] == "Bound"
    assert bound["spec"]["storageClassName"] == STORAGE_CLASS


def test_the_operator_image_starts_as_its_user_on_a_read_only_root(real_node: RealNode, namespace: str) -> None:
    """The imported operator image (hack/build-image.sh, ``trainguard:dev``) runs under the kubelet as
    uid 10001 with a read-only root filesystem, as the chart's securityContext asks."""
    cluster = real_node.cluster
    script = ("echo \"uid=$(id -u)\"; trainguard --version; "
              "if touch /probe 2>/dev/null; then echo root-writable; else echo root-read-only; fi")
    spec = pod("operator-image", real_node.name, script)
    container = spec["spec"]["containers"][0]
    container.update({"image": OPERATOR_IMAGE, "command": ["/bin/sh", "-c", script]})
    container["securityContext"]["readOnlyRootFilesystem"] = True
    container["resources"]["limits"]["memory"] = "256Mi"
    spec["spec"]["securityContext"].update({"runAsUser": 10001, "runAsGroup": 10001})
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(spec))
    done = finished(cluster, namespace, "operator-image")
    assert done["terminated"]["exitCode"] == 0, done["terminated"]
    lines = cluster.pod_logs(namespace, "operator-image").splitlines()
    assert lines[0] == "uid=10001"
    assert lines[1].startswith("trainguard ")
    assert lines[2] == "root-read-only"
