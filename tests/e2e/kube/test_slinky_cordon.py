"""Slinky cordon on the real API server, with the operator's ServiceAccount and its shipped RBAC.

No kubelet is needed: a Node object and a slurmd Pod object (as slurm-operator would create them,
scheduled onto that Node) are created as admin in the namespace ``slurm`` that
``manifests/slinky/rolebinding.yaml`` grants pod list access in (``manifests/slinky/rbac.yaml``: node
get/patch). Then, as the ServiceAccount:
the map finds the Kubernetes node behind the Slurm node, the cordon writes Slinky's reason
annotation and ``unschedulable`` together, a second cordon is a no-op, a node cordoned by someone
else is left alone, and uncordon removes only our cordon.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.kube import operator_process as op
from tests.support import kube
from trainguard.k8s import client, slinky

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.timeout(300)]

REPO_ROOT = Path(__file__).resolve().parents[3]
SLINKY_NS = "slurm"


@pytest.fixture(scope="module")
def sa_kubeconfig(kube_api: kube.LocalKube, tmp_path_factory: pytest.TempPathFactory) -> str:
    op.ok(kube_api.kubectl("apply", "-k", str(REPO_ROOT / "crds")))
    base = REPO_ROOT / "manifests" / "base"
    op.ok(kube_api.kubectl("apply", "-f", str(base / "namespace.yaml"), "-f", str(base / "serviceaccount.yaml"),
                           "-f", str(base / "rbac.yaml")))
    if kube_api.kubectl("get", "namespace", SLINKY_NS).returncode != 0:
        op.ok(kube_api.kubectl("create", "namespace", SLINKY_NS))
    if kube_api.kubectl("get", "serviceaccount", "default", "-n", SLINKY_NS).returncode != 0:
        op.ok(kube_api.kubectl("create", "serviceaccount", "default", "-n", SLINKY_NS))
    slinky_dir = REPO_ROOT / "manifests" / "slinky"
    op.ok(kube_api.kubectl("apply", "-f", str(slinky_dir / "rolebinding.yaml"), "-f", str(slinky_dir / "rbac.yaml")))
    path = tmp_path_factory.mktemp("slinky") / "kubeconfig"
    kube_api.service_account_kubeconfig("trainguard", "trainguard-system", path)
    return str(path)


@pytest.fixture
def node_and_pod(kube_api: kube.LocalKube) -> Iterator[tuple[str, str]]:
    node, slurm_node = kube.unique_name("gpu-node"), kube.unique_name("slinky")
    op.ok(kube_api.kubectl("create", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}})))
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"slurm-worker-{slurm_node}", "namespace": SLINKY_NS, "labels": {
            "app.kubernetes.io/name": "slurmd", "app.kubernetes.io/instance": "slurm-worker-slinky",
            "app.kubernetes.io/component": "worker", slinky.POD_HOSTNAME_LABEL: slurm_node}},
        "spec": {"nodeName": node, "hostname": slurm_node, "automountServiceAccountToken": False,
                 "containers": [{"name": "slurmd", "image": "ghcr.io/slinkyproject/slurmd:25.11"}]},
    }
    op.ok(kube_api.kubectl("create", "-f", "-", input=json.dumps(pod)))
    try:
        yield node, slurm_node
    finally:
        kube_api.kubectl("delete", "pod", f"slurm-worker-{slurm_node}", "-n", SLINKY_NS, "--grace-period=0",
                         "--force", "--wait=false")
        kube_api.kubectl("delete", "node", node, "--wait=false")


def test_cordon_behind_a_slurm_node_with_the_shipped_rbac(
    kube_api: kube.LocalKube, sa_kubeconfig: str, node_and_pod: tuple[str, str],
) -> None:
    node, slurm_node = node_and_pod
    reason = slinky.cordon_reason(slurm_node, "lemon node of slurm/c/1")

    async def scenario() -> tuple[slinky.Placement, slinky.Result, slinky.Result, slinky.Result]:
        async with await client.load_api_client(sa_kubeconfig) as api:
            placement = (await slinky.discover(api, SLINKY_NS))[slurm_node]
            assert placement.kube_node is not None
            first = await slinky.cordon(api, placement.kube_node, reason)
            second = await slinky.cordon(api, placement.kube_node, reason)
            undone = await slinky.uncordon(api, placement.kube_node)
            return placement, first, second, undone

    placement, first, second, undone = asyncio.run(scenario())
    assert placement.kube_node == node and placement.source == "pod"
    assert (first, second, undone) == (slinky.Result.DONE, slinky.Result.ALREADY, slinky.Result.DONE)
    after = op.get_json(kube_api, "node", node)
    assert not after["spec"].get("unschedulable")
    assert slinky.CORDON_REASON_ANNOTATION not in (after["metadata"].get("annotations") or {})


def test_a_node_cordoned_by_someone_else_is_left_alone(
    kube_api: kube.LocalKube, sa_kubeconfig: str, node_and_pod: tuple[str, str],
) -> None:
    node, slurm_node = node_and_pod
    op.ok(kube_api.kubectl("annotate", "node", node, f"{slinky.CORDON_REASON_ANNOTATION}=disk replacement"))
    op.ok(kube_api.kubectl("cordon", node))

    async def scenario() -> tuple[slinky.Result, slinky.Result]:
        async with await client.load_api_client(sa_kubeconfig) as api:
            return (await slinky.cordon(api, node, slinky.cordon_reason(slurm_node, "x")),
                    await slinky.uncordon(api, node))

    assert asyncio.run(scenario()) == (slinky.Result.NOT_OURS, slinky.Result.NOT_OURS)
    after = op.get_json(kube_api, "node", node)
    assert after["spec"]["unschedulable"] is True
    assert after["metadata"]["annotations"][slinky.CORDON_REASON_ANNOTATION] == "disk replacement"
