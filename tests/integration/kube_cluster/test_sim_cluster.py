"""Smoke tests of the simulated cluster (`hack/local-kube.sh up --cluster`) on its real
components: the upstream JobSet controller and training-operator react to pods that kwok runs
on fake GPU nodes, the scheduler places them, the controller-manager evicts from a NotReady
node, and the apiserver serves pod logs from kwok. These are the behaviours the Kubernetes
recovery tests build on; each test says which one it pins."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.kube import SCRIPT
from tests.support.kube_cluster import (
    GPU,
    JOBSET_NAME_LABEL,
    JOBSET_RESTART_LABEL,
    NODES,
    PYTORCHJOB_NAME_LABEL,
    PYTORCHJOB_ROLE_LABEL,
    SimCluster,
)

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.kube_cluster]


def node_of(pod: dict[str, Any]) -> str:
    return str(pod["spec"]["nodeName"])


def taint_keys(sim_cluster: SimCluster, node: str) -> set[str]:
    return {t["key"] for t in (sim_cluster.get("node", node) or {})["spec"].get("taints", [])}


def test_fake_nodes_offer_gpus_and_no_taint(sim_cluster: SimCluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in sim_cluster.list_objects("nodes", selector="type=kwok")}
    assert sorted(nodes) == list(NODES)
    for name, node in nodes.items():
        assert node["status"]["capacity"][GPU] == "8", name
        assert node["status"]["allocatable"][GPU] == "8", name
        assert not node["spec"].get("taints"), name
        addresses = {(a["type"], a["address"]) for a in node["status"]["addresses"]}
        assert {("InternalIP", "127.0.0.1"), ("Hostname", name)} <= addresses
        assert sim_cluster.node_ready(name)


def test_jobset_runs_restarts_after_a_pod_failure_and_completes(sim_cluster: SimCluster, sim_namespace: str) -> None:
    ns = sim_namespace
    # 2 replicated Jobs x 2 pods, 8 GPUs each: exactly the 4 fake nodes, one pod per node.
    sim_cluster.create_jobset("train", ns, replicated_jobs=[("workers", 2, 2)], gpus=8, max_restarts=3)
    selector = f"{JOBSET_NAME_LABEL}=train"
    pods = sim_cluster.wait_pods_running(ns, selector, 4)
    assert sorted(node_of(p) for p in pods) == list(NODES)
    assert {p["metadata"]["labels"][JOBSET_RESTART_LABEL] for p in pods} == {"0"}

    # One pod dies: the JobSet's own failure policy restarts it all (the failed pod is deleted
    # within about a second, so its status is checked in the bare-pod test below).
    victim = pods[1]["metadata"]["name"]
    sim_cluster.fail_pod(ns, victim, exit_code=134, reason="Error", message="Xid 79: GPU has fallen off the bus")
    sim_cluster.wait(
        "JobSet status.restarts == 1",
        lambda: (js := sim_cluster.get("jobset", "train", ns)) and js.get("status", {}).get("restarts") == 1,
    )
    fresh = sim_cluster.wait_pods_running(ns, f"{selector},{JOBSET_RESTART_LABEL}=1", 4)
    assert not {p["metadata"]["name"] for p in fresh} & {p["metadata"]["name"] for p in pods}

    # kwok's pod-complete stage on every pod: the Jobs complete, so does the JobSet.
    for pod in fresh:
        sim_cluster.complete_pod(ns, pod["metadata"]["name"])
    done = sim_cluster.wait_condition("jobset", "train", ns, "Completed")
    assert done["status"].get("terminalState") == "Completed"
    assert done["status"]["restarts"] == 1


def test_a_failed_pod_reports_exit_code_reason_and_message(sim_cluster: SimCluster, sim_namespace: str) -> None:
    ns = sim_namespace
    sim_cluster.create_pod("solo", ns, gpus=1, node=NODES[2], labels={"role": "solo"})
    (pod,) = sim_cluster.wait_pods_running(ns, "role=solo", 1)
    assert node_of(pod) == NODES[2]
    # A message with ": " in it, as real error lines have (kwok's upstream stage broke on it).
    sim_cluster.fail_pod(ns, "solo", exit_code=137, reason="OOMKilled", message="Xid 79: GPU has fallen off the bus")
    failed = sim_cluster.wait(
        "pod solo Failed",
        lambda: (p := sim_cluster.get("pod", "solo", ns)) and p["status"].get("phase") == "Failed" and p,
    )
    term = failed["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (137, "OOMKilled")
    assert term["message"] == "Xid 79: GPU has fallen off the bus"
    # Completion is a separate, label-gated stage.
    sim_cluster.create_pod("done", ns, gpus=0, labels={"role": "done"})
    sim_cluster.wait_pods_running(ns, "role=done", 1)
    sim_cluster.complete_pod(ns, "done")
    sim_cluster.wait(
        "pod done Succeeded",
        lambda: (p := sim_cluster.get("pod", "done", ns)) and p["status"].get("phase") == "Succeeded",
    )


def test_pytorchjob_master_and_two_workers_run(sim_cluster: SimCluster, sim_namespace: str) -> None:
    ns = sim_namespace
    sim_cluster.create_pytorchjob("ptj", ns, workers=2, gpus=8)
    pods = sim_cluster.wait_pods_running(ns, f"{PYTORCHJOB_NAME_LABEL}=ptj", 3)
    roles = sorted(p["metadata"]["labels"][PYTORCHJOB_ROLE_LABEL] for p in pods)
    assert roles == ["master", "worker", "worker"]
    assert len({node_of(p) for p in pods}) == 3  # 8 GPUs each: one pod per node
    sim_cluster.wait_condition("pytorchjob", "ptj", ns, "Running")


def test_pytorchjob_webhook_rejects_an_invalid_job(sim_cluster: SimCluster, sim_namespace: str) -> None:
    # The training-operator's validating webhook is wired (URL on loopback, certificate from
    # its private directory): a PyTorchJob without a Master/Worker container named pytorch
    # is refused at admission, not accepted and left for the controller.
    manifest = sim_cluster.pytorchjob_manifest("bad", sim_namespace, workers=1)
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "not-pytorch"
    with pytest.raises(RuntimeError, match=r"(?i)admission webhook|denied"):
        sim_cluster.apply(manifest)
    assert sim_cluster.get("pytorchjob", "bad", sim_namespace) is None


def test_pod_logs_are_served_through_the_api_including_appended_lines(
    sim_cluster: SimCluster, sim_namespace: str
) -> None:
    ns = sim_namespace
    sim_cluster.create_jobset("logs", ns, replicated_jobs=[("workers", 1, 1)], gpus=1)
    (pod,) = sim_cluster.wait_pods_running(ns, f"{JOBSET_NAME_LABEL}=logs", 1)
    name = pod["metadata"]["name"]
    sim_cluster.write_pod_log(ns, name, ["step 1 loss 2.31", "step 2 loss 2.12"])
    sim_cluster.wait(
        "the first lines through the API",
        lambda: "step 2 loss 2.12" in (text := sim_cluster.pod_logs(ns, name)) and text,
    )
    # A follower (`kubectl logs -f`) sees a line appended after it attached.
    follower = subprocess.Popen(
        [str(sim_cluster.kubectl_path), "logs", "-f", "-n", ns, name],
        env={**os.environ, "KUBECONFIG": str(sim_cluster.kubeconfig)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline().strip() == "step 1 loss 2.31"
        assert follower.stdout.readline().strip() == "step 2 loss 2.12"
        sim_cluster.write_pod_log(ns, name, ["NCCL WARN Xid 79 on GPU 3"])
        assert follower.stdout.readline().strip() == "NCCL WARN Xid 79 on GPU 3"
    finally:
        follower.kill()
        follower.wait(timeout=10)
    assert sim_cluster.pod_logs(ns, name).splitlines() == [
        "step 1 loss 2.31",
        "step 2 loss 2.12",
        "NCCL WARN Xid 79 on GPU 3",
    ]


def test_a_node_goes_not_ready_and_back(sim_cluster: SimCluster) -> None:
    node = NODES[3]
    try:
        sim_cluster.set_node_ready(node, False)
        sim_cluster.wait(f"{node} NotReady", lambda: not sim_cluster.node_ready(node))
        # The controller-manager's node lifecycle taints it like a real unreachable node.
        sim_cluster.wait(
            f"{node} tainted not-ready",
            lambda: "node.kubernetes.io/not-ready" in taint_keys(sim_cluster, node),
        )
    finally:
        sim_cluster.set_node_ready(node, True)
    sim_cluster.wait(f"{node} Ready again", lambda: sim_cluster.node_ready(node))
    sim_cluster.wait(
        f"{node} untainted",
        lambda: not taint_keys(sim_cluster, node),
    )
    addresses = {(a["type"], a["address"]) for a in (sim_cluster.get("node", node) or {})["status"]["addresses"]}
    assert ("InternalIP", "127.0.0.1") in addresses


def test_status_reports_every_component_and_the_operator_cert_dir_is_private(sim_cluster: SimCluster) -> None:
    done = subprocess.run(
        [str(SCRIPT), "status", "--cluster"], capture_output=True, text=True, timeout=60, check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for component in ("kube-controller-manager", "kube-scheduler", "kwok", "jobset", "training-operator"):
        assert f"{component}:" in done.stdout
        line = next(ln for ln in done.stdout.splitlines() if ln.startswith(f"{component}:"))
        assert ", ready," in line, line
    # The training-operator reads its certificate from a fixed path; it sees this cluster's own
    # directory there (a private mount namespace); the machine's path never gets this cluster's.
    state = sim_cluster.kube.state_dir / "cluster"
    pid = (state / "training-operator.pid").read_text().strip()
    assert " /tmp/k8s-webhook-server " in Path(f"/proc/{pid}/mounts").read_text()
    ours = (state / "to-webhook" / "serving-certs" / "tls.crt").read_bytes()
    assert Path(f"/proc/{pid}/root/tmp/k8s-webhook-server/serving-certs/tls.crt").read_bytes() == ours
    host = Path("/tmp/k8s-webhook-server/serving-certs/tls.crt")
    assert not host.exists() or host.read_bytes() != ours
