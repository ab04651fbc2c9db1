"""End to end with a real container: a JobSet pod on the real kubelet node (``--real-node``) prints an
Xid 79 and hangs, as a process does whose GPU fell off the bus; ``trainguard operator --scheduler
kubernetes`` reads the line through the kubelet's log endpoint (the apiserver's ``pods/log`` proxied to
the real kubelet, not kwok's simulated logs), excludes the real node (cordon plus our NoExecute taint)
and restarts the JobSet (suspend, resume); the new pod runs on a kwok node and the JobSet completes.

What only this test covers: a container a real kubelet kills. Our suspend deletes the pod, and the
kubelet stops it seconds after our resume (kwok's pods vanish at once): its ending (killed) and anything
it printed after our suspend are our restart's doing, never a new failure of the attempt our resume
started (that ending was once judged a crash of the new attempt, and the healthy restarted JobSet was
stopped). The rules themselves (one exclusion, Monitor changes nothing, no restart beside the JobSet's
own) are proven on kwok nodes in ``test_jobset_recovery.py``.

The process prints the Xid only once the test has seen the operator read its first line (``kubectl exec``
creates the file it waits for), so the line is read while the operator watches.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.kube_cluster.harness import (
    POLICY,
    XID,
    completed,
    install,
    lift_our_exclusions,
    lines_read,
    operator_running,
    pods_of,
    until,
)
from tests.support.kube_cluster import NODES, SimCluster
from tests.support.real_node import BUSYBOX_IMAGE, REAL_NODE_TAINT, RealNode
from trainguard.k8s.kubejobs import common, nodes
from trainguard.model import vocab

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.real_node,
              pytest.mark.timeout(600)]

SCRIPT = f"""echo "iteration 1 loss 2.0"
until [ -e /tmp/xid ]; do sleep 1; done
echo "{XID}"
while true; do sleep 1; done
"""
"""A training process that meets a fallen-off GPU: its first step, then (once the test says so) the
driver's Xid, then it hangs in its next CUDA call until it is killed."""


def pod_spec(node: str) -> dict[str, Any]:
    """Prefers the real node (its first attempt runs there) but may run anywhere: once we exclude the
    real node, the JobSet's restart lands on a kwok node, where kwok plays the same image."""
    return {
        "restartPolicy": "Never",
        "tolerations": [{"key": REAL_NODE_TAINT, "operator": "Exists"}],
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100,
            "preference": {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                                 "values": [node]}]}}]}},
        "terminationGracePeriodSeconds": 1,
        "containers": [{
            "name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/sh", "-c", SCRIPT],
            "resources": {"limits": {"memory": "32Mi", "cpu": "100m"}},
        }],
    }


def running_pods(sim: SimCluster, ns: str) -> list[dict[str, Any]]:
    """The JobSet's running pods (not being deleted)."""
    return [p for p in pods_of(sim, ns, "train") if (p.get("status") or {}).get("phase") == "Running"]


@pytest.fixture
def namespace(real_node: RealNode) -> Iterator[str]:
    name = real_node.cluster.create_namespace("realjs")
    try:
        yield name
    finally:
        real_node.cluster.delete_namespace(name, wait=120)


async def test_an_xid_from_a_real_container_excludes_the_real_node_and_the_jobset_restarts_elsewhere(
        real_node: RealNode, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sim, ns, node = real_node.cluster, namespace, real_node.name
    install(sim, POLICY.format(ns=ns, mode="Action"))
    manifest = sim.jobset_manifest("train", ns, replicated_jobs=(("workers", 1, 1),),
                                   annotations={"trainguard.dev/policy": "gpu"})
    manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"] = pod_spec(node)
    wid = common.workload_id(ns, "JobSet", "train")

    with lifted(sim, node):
        async with operator_running(sim, ns, tmp_path, monkeypatch) as op:
            sim.kubectl("create", "-f", "-", input=json.dumps(manifest))
            first = await until("the pod running", lambda: running_pods(sim, ns))
            assert first[0]["spec"]["nodeName"] == node, first[0]["spec"]
            assert first[0]["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
            pod, uid = first[0]["metadata"]["name"], first[0]["metadata"]["uid"]
            await until("the pod's first line read through the kubelet", lambda: lines_read(op.db, wid) >= 1)
            sim.kubectl("exec", "-n", ns, pod, "-c", "main", "--", "/bin/sh", "-c", ": > /tmp/xid")
            await until("the Xid line read", lambda: lines_read(op.db, wid) >= 2)
            assert XID in sim.pod_logs(ns, pod)

            recorded = await op.recovery(wid)
            advice = recorded.one(vocab.AuditKind.ADVICE)
            assert advice.payload["action"] == "requeue" and advice.payload["exclude_nodes"] == [node], (
                advice.payload["reasons"], recorded.trail)
            excluded = sim.get("node", node) or {}
            assert nodes.has_our_taint(excluded) and excluded["spec"]["unschedulable"] is True

            try:
                again = await until("the restarted JobSet's new pod running",
                                    lambda: [p for p in running_pods(sim, ns) or [] if p["metadata"]["uid"] != uid])
            except AssertionError:
                print(sim.kubectl("get", "jobsets,jobs,pods", "-n", ns, "-o", "wide"))
                print(sim.kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp"))
                raise
            assert again[0]["spec"]["nodeName"] in NODES  # off the real node, on a kwok node
            await until("the old pod gone (killed by the real kubelet)",
                        lambda: all(p["metadata"]["uid"] != uid for p in sim.list_objects("pods", ns)))
            sim.complete_pod(ns, again[0]["metadata"]["name"])
            await until("the JobSet completed", lambda: completed(sim, ns, "train"))

            # one restart, ours, and nothing judged of the killed pod: no second advice, never a stop
            jobset = sim.get("jobset", "train", ns) or {}
            notes = jobset["metadata"].get("annotations") or {}
            assert notes.get(common.RESTARTS_ANNOTATION) == "1" and common.STOPPED_ANNOTATION not in notes, notes
            trail = (await op.recovery(wid)).trail
            assert [p for kind, p in trail if kind == vocab.AuditKind.ADVICE.value] == [advice.payload], trail


@contextlib.contextmanager
def lifted(sim: SimCluster, node: str) -> Iterator[None]:
    """On the way out, our exclusion of the real node is lifted (other tests run pods there)."""
    try:
        yield
    finally:
        lift_our_exclusions(sim, names=(node,))
