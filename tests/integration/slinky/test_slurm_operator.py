"""Against SchedMD's slurm-operator v1.0.1 and Slurm 26.05 (``hack/local-kube.sh up --cluster --slinky``).

No pod or comment is made by hand here: slurm-operator created the NodeSet pods on kwok nodes and
wrote each Slurm node's comment; the Slurm nodes are live host slurmd processes. Our Slinky code
(``k8s/slinky.py``) maps them, and its cordon (reason annotation and ``unschedulable`` in one write)
makes slurm-operator drain the Slurm node with ``slurm-operator: <our reason>``; our uncordon makes
it return the node to service. The slurmrestd adapter speaks v0.0.44 to the same slurmrestd.
``trainguard doctor --slinky-namespace`` finds the operator's CRDs, its NodeSet pods on their nodes
and the cordon's permissions.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support import slinky as sl
from tests.support.doctor import migrated_sqlite, run_doctor
from trainguard.k8s import client, slinky
from trainguard.model import workloads
from trainguard.schedulers import slurm_rest

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.slinky,
              pytest.mark.timeout(900)]


def comments(cluster: sl.SlinkyCluster) -> dict[str, str]:
    return {name: cluster.slurm_node(name).get("Comment", "") for name in sl.SLURM_NODES}


def test_the_map_comes_from_slurm_operators_pods_and_comments(slinky_cluster: sl.SlinkyCluster) -> None:
    async def scenario() -> tuple[dict[str, slinky.Placement], dict[str, slinky.Placement]]:
        async with await client.load_api_client(str(slinky_cluster.kube.kubeconfig)) as api:
            from_pods = await slinky.discover(api, sl.NAMESPACE)
            pods = await slinky.k8s.CoreV1Api(api).list_namespaced_pod(sl.NAMESPACE,
                                                                       label_selector=slinky.SLURMD_SELECTOR)
            both = slinky.build_map((client.to_dict(api, p) for p in pods.items or []), comments(slinky_cluster))
            return from_pods, both

    from_pods, both = asyncio.run(scenario())
    assert sorted(from_pods) == sorted(both) == list(sl.SLURM_NODES)
    for name in sl.SLURM_NODES:
        kube_node = slinky_cluster.kube_node_of(name)
        assert kube_node.startswith("kwok-node-")
        assert from_pods[name] == slinky.Placement(name, sl.NAMESPACE, name, kube_node, "pod")
        assert both[name] == slinky.Placement(name, sl.NAMESPACE, name, kube_node, "comment")


def test_our_cordon_drains_the_slurm_node_and_our_uncordon_returns_it(slinky_cluster: sl.SlinkyCluster) -> None:
    name = sl.SLURM_NODES[1]
    kube_node = slinky_cluster.kube_node_of(name)
    reason = slinky.cordon_reason(name, "lemon node (integration test)")

    async def act(undo: bool) -> slinky.Result:
        async with await client.load_api_client(str(slinky_cluster.kube.kubeconfig)) as api:
            return await (slinky.uncordon(api, kube_node) if undo else slinky.cordon(api, kube_node, reason))

    def drained() -> dict[str, str] | None:
        node = slinky_cluster.slurm_node(name)
        return node if "DRAIN" in node.get("State", "") else None

    def in_service() -> dict[str, str] | None:
        node = slinky_cluster.slurm_node(name)
        return node if "DRAIN" not in node.get("State", "") else None

    assert in_service() is not None, slinky_cluster.slurm_node(name)
    try:
        assert asyncio.run(act(undo=False)) is slinky.Result.DONE
        node = slinky_cluster.wait(f"slurm-operator to drain {name}", drained)
        assert node["Reason"].startswith(f"slurm-operator: {reason}"), node["Reason"]
        # another node of the NodeSet is untouched
        assert "DRAIN" not in slinky_cluster.slurm_node(sl.SLURM_NODES[0])["State"]
    finally:
        undone = asyncio.run(act(undo=True))
    assert undone is slinky.Result.DONE
    slinky_cluster.wait(f"slurm-operator to return {name} to service", in_service)


def test_the_rest_adapter_speaks_v0_0_44_to_the_slurmrestd_slurm_operator_uses(
        slinky_cluster: sl.SlinkyCluster) -> None:
    env = slinky_cluster.env

    async def scenario() -> tuple[str, list[workloads.NodeSnapshot]]:
        rest = slurm_rest.SlurmRest(env["SLURMRESTD_URL"], token=env["SLURM_JWT"], timeout=30)
        try:
            return await rest.api_version(), await rest.list_nodes()
        finally:
            await rest.close()

    version, nodes = asyncio.run(scenario())
    assert env["SLURMRESTD_URL"] == "http://127.0.0.1:6820" and env["SLURM_VERSION"].startswith("26.05.")
    assert version == "v0.0.44"
    assert sorted(n.name for n in nodes) == list(sl.SLURM_NODES)


def test_doctor_finds_slurm_operators_crds_pods_and_cordon_path(slinky_cluster: sl.SlinkyCluster,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """``doctor --slinky-namespace`` against the real operator's CRDs and NodeSet pods. Here slurm-operator
    runs as a host process, not a Deployment: ``slinky.operator`` and ``slinky.version`` can only warn."""
    run = run_doctor(monkeypatch, "--slinky-namespace", sl.NAMESPACE,
                     env={"KUBECONFIG": str(slinky_cluster.kube.kubeconfig),
                          "TRAINGUARD_DB_URL": migrated_sqlite(tmp_path)})
    found = {c["name"]: c for c in run.checks if c["name"].startswith("slinky.")}
    assert {name: c["status"] for name, c in found.items()} == {
        "slinky.crds": "ok", "slinky.operator": "warn", "slinky.version": "warn", "slinky.pods": "ok",
        "slinky.rbac": "ok"}, found
    assert "controllers" in found["slinky.crds"]["message"] and "nodesets" in found["slinky.crds"]["message"]
    assert f"{len(sl.SLURM_NODES)} of {len(sl.SLURM_NODES)} slurmd pods" in found["slinky.pods"]["message"]
    assert not [name for name in run.failed() if name.startswith("slinky.")], run.failed()
