"""The validation operations of the Kubernetes adapter (``k8s/kubejobs/node_checks.py``) against a real
kube-apiserver, as the operator's ServiceAccount bound to the shipped RBAC: the cluster-wide roles of
manifests/base and manifests/kubernetes by a ClusterRoleBinding, the check role (``trainguard-kubernetes-checks``)
by a RoleBinding in the operator's namespace only, as the manifests bind it.

There is no controller here: the test writes the check pod and the Job's status the Job controller and the
kubelet would write, then checks the verdict the adapter reads. The controllers' reactions, and the whole
round through the undrain sweep, are in ``tests/integration/kube_cluster/test_validation_kube.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kube import LocalKube, unique_name
from trainguard.k8s import client
from trainguard.k8s.kubejobs import node_checks, nodes, scheduler
from trainguard.model import checks

pytestmark = [pytest.mark.integration, pytest.mark.kube]

REPO = Path(__file__).resolve().parents[3]
CHECKS_ROLE = "trainguard-kubernetes-checks"
NOW = "2026-12-01T10:00:00Z"


def ok(kube: LocalKube, *args: str, input: str | None = None) -> str:
    done = kube.kubectl(*args, input=input)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def _roles() -> dict[str, list[dict[str, Any]]]:
    """The shipped ClusterRoles of the Kubernetes install, by name."""
    roles: dict[str, list[dict[str, Any]]] = {}
    for path in (REPO / "manifests/base/rbac.yaml", REPO / "manifests/kubernetes/rbac.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "ClusterRole" and doc["metadata"]["name"] != "trainguard-slinky-pods":
                roles[doc["metadata"]["name"]] = doc["rules"]
    return roles


@pytest.fixture
async def world(kube_api: LocalKube, tmp_path: Path) -> AsyncIterator[tuple[LocalKube, str, str,
                                                                             scheduler.KubeScheduler]]:
    if kube_api.kubectl("get", "node", "kwok-node-1").returncode == 0:
        pytest.skip("needs the API without controllers (hack/local-kube.sh up, not up --cluster)")
    ns, sa, role, node = unique_name("tg-nc"), "trainguard", unique_name("tg-nc"), unique_name("tg-nc-node")
    roles = _roles()
    assert CHECKS_ROLE in roles
    ok(kube_api, "create", "namespace", ns)
    ok(kube_api, "create", "serviceaccount", sa, "-n", ns)
    subject = [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
    ok(kube_api, "apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
         "rules": [rule for name, rules in roles.items() if name != CHECKS_ROLE for rule in rules]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
         "subjects": subject},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": f"{role}-checks"},
         "rules": roles[CHECKS_ROLE]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": f"{role}-checks", "namespace": ns},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{role}-checks"},
         "subjects": subject},
    ]))
    ok(kube_api, "apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": node}, "spec": {}}))
    ok(kube_api, "patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps({"status": {
        "capacity": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi", "pods": "110"},
        "allocatable": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi", "pods": "110"}}}))
    config = kube_api.service_account_kubeconfig(sa, ns, tmp_path / "operator.kubeconfig")
    adapter = scheduler.KubeScheduler(await client.load_api_client(str(config)), namespaces=(ns,),
                                      check_namespace=ns)
    try:
        yield kube_api, ns, node, adapter
    finally:
        await adapter.close()
        kube_api.kubectl("delete", "node", node, "--wait=false")
        kube_api.kubectl("delete", "namespace", ns, "--wait=false")
        kube_api.kubectl("delete", "clusterrolebinding,clusterrole", role, "--wait=false")
        kube_api.kubectl("delete", "clusterrole", f"{role}-checks", "--wait=false")


def _node(kube: LocalKube, name: str) -> dict[str, Any]:
    return json.loads(ok(kube, "get", "node", name, "-o", "json"))


def _keys(node: dict[str, Any]) -> set[str]:
    """Our taints on the node (the apiserver's admission adds ``node.kubernetes.io/not-ready`` to a new node)."""
    return {t["key"] for t in node["spec"].get("taints") or []} & {node_checks.VALIDATING_TAINT, nodes.TAINT_KEY}


async def test_a_round_of_calls_with_the_shipped_rbac_reserves_submits_reads_the_verdict_and_cleans_up(
        world: tuple[LocalKube, str, str, scheduler.KubeScheduler]) -> None:
    kube, ns, node, adapter = world
    await adapter.drain_node(node, "trainguard: suspect node (test)")
    assert await adapter.reserve_node(node, 40) == "trainguard.dev/validating:NoSchedule"
    version = _node(kube, node)["metadata"]["resourceVersion"]
    await adapter.reserve_node(node, 40)  # already there: nothing written
    assert _node(kube, node)["metadata"]["resourceVersion"] == version
    await adapter.resume_node(node)  # the round's open: our exclusion lifted, our validating taint stays
    opened = _node(kube, node)
    assert _keys(opened) == {node_checks.VALIDATING_TAINT} and not opened["spec"].get("unschedulable")

    assert await adapter.find_check("t1") is None
    job_id = await adapter.submit_check(node, ["/bin/gpu-check", "--all"], tag="t1", minutes=30, output_dir="/tmp",
                                        image="site/gpu-check:1")
    assert job_id == f"{ns}/trainguard-check-t1"
    again = await adapter.submit_check(node, ["/bin/gpu-check", "--all"], tag="t1", minutes=30, output_dir="/tmp",
                                       image="site/gpu-check:1")
    assert again == job_id  # a repeated submit (a restart) is the same Job: the apiserver's 409
    assert await adapter.find_check("t1") == job_id
    job = json.loads(ok(kube, "get", "job", "trainguard-check-t1", "-n", ns, "-o", "json"))
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (0, 1800)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/bin/gpu-check", "--all"] and container["resources"]["limits"] == {
        "nvidia.com/gpu": "8"}
    status = await adapter.check_status(job_id)
    assert (status.phase, status.state) == (checks.CheckPhase.WAITING, "no pod yet")

    # what the Job controller and the kubelet would write: the check's pod ended with exit 3, the Job failed
    ok(kube, "apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "trainguard-check-t1-x", "namespace": ns, "labels": {node_checks.CHECK_LABEL: "t1"}},
        "spec": {"nodeName": node, "restartPolicy": "Never", "automountServiceAccountToken": False,
                 "containers": [{"name": node_checks.CONTAINER, "image": "site/gpu-check:1"}]}}))
    ok(kube, "patch", "pod", "trainguard-check-t1-x", "-n", ns, "--subresource=status", "--type=merge", "-p",
       json.dumps({"status": {"phase": "Failed", "containerStatuses": [{
           "name": node_checks.CONTAINER, "image": "site/gpu-check:1", "imageID": "", "ready": False,
           "restartCount": 0, "state": {"terminated": {"exitCode": 3, "reason": "Error", "startedAt": NOW,
                                                       "finishedAt": NOW}}}]}}))
    ended = [{"type": kind, "status": "True", "reason": "BackoffLimitExceeded", "message": "failed",
              "lastProbeTime": NOW, "lastTransitionTime": NOW} for kind in ("FailureTarget", "Failed")]
    ok(kube, "patch", "job", "trainguard-check-t1", "-n", ns, "--subresource=status", "--type=merge", "-p",
       json.dumps({"status": {"startTime": NOW, "failed": 1, "conditions": ended}}))
    status = await adapter.check_status(job_id)
    assert (status.phase, status.exit_code) == (checks.CheckPhase.FAILED, 3)
    assert status.output_tail  # the log (a node without a kubelet: why it cannot be read)

    await adapter.cancel_check(job_id)
    await adapter.cancel_check(job_id)  # already gone: success
    assert (await adapter.check_status(job_id)).phase is checks.CheckPhase.GONE
    await adapter.drain_node(node, "trainguard: failed validation (exit 3), held for repair")
    await adapter.unreserve_node(node)
    await adapter.unreserve_node(node)  # not there: nothing to do
    held = _node(kube, node)
    assert _keys(held) == {nodes.TAINT_KEY} and held["spec"]["unschedulable"] is True
    await adapter.unreserve_node("no-such-node")  # a node that vanished: nothing left to undo
