"""`helm install --wait` on the simulated cluster (`hack/local-kube.sh up --cluster`): the real
controller-manager and scheduler place the operator's pods, and the MySQL subchart's, on kwok's fake
nodes, which report them Running and Ready; Helm waits until the Deployment is Available, the
StatefulSet ready and its claim bound. With the MySQL subchart and with an external database.

kwok runs no container: this proves the objects are schedulable and wired (claims, Secrets,
ServiceAccount, init container), not that the image works.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import helm as helm_support
from tests.support import kube_cluster

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.helm,
              pytest.mark.timeout(kube_cluster.BUILD_TIMEOUT_S)]


def _volume(sim: kube_cluster.SimCluster, namespace: str, claim: str, size: str) -> str:
    """A PersistentVolume for one claim of this test (the simulated cluster has no provisioner):
    pre-bound to the claim by claimRef, so no other test's claim takes it."""
    name = f"{namespace}-data"
    sim.apply({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
               "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"/tmp/{name}"},
                        "claimRef": {"namespace": namespace, "name": claim}}})
    return name


def _what_helm_waits_on(sim: kube_cluster.SimCluster, namespace: str) -> str:
    """The namespace's workloads, claims and events and the nodes' taints: the message of a failed
    ``--wait``, which by itself only says its deadline passed."""
    parts = []
    for args in (("get", "deployments,statefulsets,pods,pvc", "-n", namespace, "-o", "wide"),
                 ("get", "events", "-n", namespace, "--sort-by=.lastTimestamp"),
                 ("get", "pv", "-o", "wide"),
                 ("get", "nodes", "-o", "custom-columns=NAME:.metadata.name,UNSCHEDULABLE:.spec.unschedulable,"
                                        "TAINTS:.spec.taints[*].key,READY:.status.conditions[?(@.type=='Ready')].status")):
        done = sim.kube.kubectl(*args)
        parts.append(f"$ kubectl {' '.join(args)}\n{done.stdout}{done.stderr}")
    return "\n".join(parts)


KWOK = {"type": "kwok"}
"""The simulated nodes (not the real node of --real-node, where these images could not be pulled)."""


@pytest.mark.parametrize("database", ["mysql", "external"])
def test_install_runs_on_the_simulated_cluster(database: str, helm: helm_support.Helm,
                                               sim_cluster: kube_cluster.SimCluster, sim_namespace: str,
                                               tmp_path: Path) -> None:
    release = kube_cluster.unique_name("sim")
    values: dict[str, Any]
    if database == "mysql":
        values = {"mysql": {"enabled": True, "nodeSelector": KWOK}}
        volume = _volume(sim_cluster, sim_namespace, f"data-{release}-mysql-0", "8Gi")
    else:
        sim_cluster.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": sim_namespace},
                           "stringData": {"url": "postgresql+asyncpg://tg:pw@postgres.db.svc/trainguard"}})
        values = {"database": {"url": {"existingSecret": "db"}}}
        volume = ""
    values["nodeSelector"] = KWOK
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    try:
        done = helm.run("install", release, str(helm_support.CHART), "-n", sim_namespace, "-f", str(values_file),
                        "--wait", "--timeout", "5m", kubeconfig=sim_cluster.kubeconfig, timeout=400)
        assert done.returncode == 0, f"{done.stderr}\n{_what_helm_waits_on(sim_cluster, sim_namespace)}"
        deployment = sim_cluster.get("deployment", f"{release}-trainguard", sim_namespace)
        assert deployment is not None
        assert deployment["status"].get("availableReplicas") == 1, deployment["status"]
        pods = sim_cluster.wait_pods_running(sim_namespace, "app.kubernetes.io/component=operator", 1)
        assert pods[0]["spec"]["nodeName"] in kube_cluster.NODES
        assert pods[0]["spec"]["serviceAccountName"] == f"{release}-trainguard"
        if database == "mysql":
            (mysql,) = sim_cluster.wait_pods_running(sim_namespace, "app.kubernetes.io/name=mysql", 1)
            assert mysql["spec"]["nodeName"] in kube_cluster.NODES
            claim = sim_cluster.get("pvc", f"data-{release}-mysql-0", sim_namespace)
            assert claim is not None and claim["status"]["phase"] == "Bound"
        done = helm.run("uninstall", release, "-n", sim_namespace, "--wait", kubeconfig=sim_cluster.kubeconfig)
        assert done.returncode == 0, done.stderr
        sim_cluster.wait("the operator pods gone",
                         lambda: not sim_cluster.pods(sim_namespace, "app.kubernetes.io/component=operator") or None)
    finally:
        if volume:
            sim_cluster.kube.kubectl("delete", "pv", volume, "--ignore-not-found", "--wait=false")
