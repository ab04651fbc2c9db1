"""The chart installed and running on the real node (issue 26): ``helm install`` with the MySQL subchart
on ``real-node-1`` (``hack/local-kube.sh up --cluster --real-node``), where the kubelet really runs the
containers: the operator image ``trainguard:dev`` and the MariaDB image built from Debian's packages
(hack/build-mysql-image.sh).

The migration init container and the operator run as uid 10001 on a read-only root filesystem (the pod
spec, and what the processes see inside); the kubelet's probes pass (the pod turns Ready and is not
restarted); the operator's audit store is the subchart's server, reached through its Service name
(kube-proxy and CoreDNS on the node): the migrated tables are in MariaDB; a RecoveryPolicy applied with
kubectl is Accepted. ``helm upgrade`` to a new image tag, a restart of the MariaDB pod and
``helm rollback`` keep the store's data (a row written before is read after each). ``helm test`` runs
``trainguard doctor`` in a pod, which finds the store and, with the operator's ServiceAccount, the
apiserver and every permission the operator needs.
"""

from __future__ import annotations

import base64
import re
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import helm as helm_support
from tests.support import kube_cluster
from tests.support.real_node import RealNode

pytestmark = [pytest.mark.integration, pytest.mark.kube_cluster, pytest.mark.real_node, pytest.mark.helm,
              pytest.mark.timeout(kube_cluster.BUILD_TIMEOUT_S)]

MYSQL_IMAGE = ("localhost/trainguard-mariadb", "10.11-1")
"""hack/build-mysql-image.sh's image, imported by ``up --real-node``."""
UPGRADE_TAG = "dev-2"
"""The operator image under a second tag (``up --real-node`` tags it), for the upgrade."""
UID = 10001


def _condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for condition in (obj or {}).get("status", {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return {}


def _ready_pod(cluster: kube_cluster.SimCluster, namespace: str, selector: str,
               where: Callable[[dict[str, Any]], bool] = lambda pod: True) -> dict[str, Any] | None:
    """The one pod of ``selector`` (none other, none being deleted), once it is Ready and ``where`` holds."""
    pods = [p for p in cluster.pods(namespace, selector) if not p["metadata"].get("deletionTimestamp")]
    ready = [p for p in pods if _condition(p, "Ready").get("status") == "True" and where(p)]
    return ready[0] if len(pods) == 1 and ready else None


def _diagnosis(cluster: kube_cluster.SimCluster, namespace: str) -> str:
    """The namespace's pods, events and the operator's log: the message of a failed wait."""
    parts = []
    for args in (("get", "pods,pvc", "-n", namespace, "-o", "wide"),
                 ("get", "events", "-n", namespace, "--sort-by=.lastTimestamp"),
                 ("logs", "-n", namespace, "-l", "app.kubernetes.io/component=operator", "--all-containers",
                  "--tail", "40")):
        done = cluster.kube.kubectl(*args)
        parts.append(f"$ kubectl {' '.join(args)}\n{done.stdout}{done.stderr}")
    return "\n".join(parts)


def _sql(cluster: kube_cluster.SimCluster, namespace: str, pod: str, statement: str) -> list[str]:
    """Rows of ``statement`` run by the MariaDB client inside the server's pod, as the chart's user."""
    out = cluster.kubectl("exec", "-n", namespace, pod, "-c", "mysql", "--", "sh", "-c",
                          'exec mariadb -N -B -u"$MYSQL_USER" -p"$MYSQL_PASSWORD" "$MYSQL_DATABASE" -e "$1"',
                          "sh", statement)
    return out.splitlines()


@pytest.mark.slow(reason="one release's whole life on a real kubelet: install, upgrade, a MariaDB restart, rollback "
                  "and helm test (about 170 s on a loaded 2-core machine)")
def test_the_chart_runs_on_the_real_node_with_its_mysql(real_node: RealNode, helm: helm_support.Helm,
                                                       tmp_path: Path) -> None:
    cluster = real_node.cluster
    namespace = cluster.create_namespace("chart-rn")
    release = kube_cluster.unique_name("rn")
    pinned = {"kubernetes.io/hostname": real_node.name}
    values: dict[str, Any] = {
        "image": {"repository": "trainguard", "tag": "dev", "pullPolicy": "Never"},
        "slurm": {"enabled": False}, "kubernetes": {"enabled": True},
        "nodeSelector": pinned,
        "mysql": {"enabled": True, "nodeSelector": pinned, "persistence": {"size": "1Gi"},
                  "image": {"repository": MYSQL_IMAGE[0], "tag": MYSQL_IMAGE[1], "pullPolicy": "Never"}},
    }
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    operator_selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator"
    mysql_selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/name=mysql"
    try:
        started = time.monotonic()
        done = helm.run("install", release, str(helm_support.CHART), "-n", namespace, "-f", str(values_file),
                        "--wait", "--timeout", "10m", kubeconfig=cluster.kubeconfig, timeout=700)
        assert done.returncode == 0, f"{done.stderr}\n{_diagnosis(cluster, namespace)}"
        operator = cluster.wait("the operator pod Ready",
                                lambda: _ready_pod(cluster, namespace, operator_selector), timeout=60)
        print(f"helm install -> operator Ready: {time.monotonic() - started:.0f} s")
        print(cluster.kubectl("get", "pod", "-n", namespace, "-o", "wide"))

        # --- the pod spec: uid 10001, read-only root, on the real node, probes answered -----------------
        spec, status = operator["spec"], operator["status"]
        assert spec["nodeName"] == real_node.name
        assert spec["securityContext"]["runAsUser"] == UID and spec["securityContext"]["runAsNonRoot"] is True
        (migrate,) = spec["initContainers"]
        (main,) = spec["containers"]
        for container in (migrate, main):
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, container["name"]
            assert container["image"] == "trainguard:dev"
        (init_status,) = status["initContainerStatuses"]
        assert init_status["state"]["terminated"]["exitCode"] == 0, init_status
        assert init_status["containerID"].startswith("containerd://")  # a real container ran the migration
        (main_status,) = status["containerStatuses"]
        assert main_status["ready"] is True and main_status["restartCount"] == 0, main_status
        assert {"livenessProbe", "readinessProbe", "startupProbe"} <= set(main), main  # the kubelet called them
        # --- inside the container: the uid and the read-only root as the process sees them --------------
        pod = operator["metadata"]["name"]
        seen = cluster.kubectl("exec", "-n", namespace, pod, "-c", "operator", "--", "sh", "-c",
                               "id -u; id -g; if touch /probe 2>/dev/null; then echo writable; else echo read-only; fi;"
                               " grep ' / ' /proc/mounts | cut -d' ' -f4 | cut -d, -f1").split()
        assert seen == [str(UID), str(UID), "read-only", "ro"], seen

        # --- the store is the subchart's MariaDB, reached through its Service name ----------------------
        mysql = cluster.wait("the MariaDB pod Ready", lambda: _ready_pod(cluster, namespace, mysql_selector), 60)
        assert mysql["spec"]["nodeName"] == real_node.name
        assert mysql["spec"]["containers"][0]["image"] == ":".join(MYSQL_IMAGE)
        tables = set(_sql(cluster, namespace, mysql["metadata"]["name"], "SHOW TABLES"))
        assert {"alembic_version", "workloads", "audit_log", "actions"} <= tables, tables
        (version,) = _sql(cluster, namespace, mysql["metadata"]["name"], "SELECT version_num FROM alembic_version")
        server = _sql(cluster, namespace, mysql["metadata"]["name"], "SELECT VERSION()")
        assert "MariaDB" in server[0], server
        # the URL the operator was given: the subchart's Service name (routed by kube-proxy, resolved by CoreDNS)
        url = cluster.kubectl("get", "secret", f"{release}-mysql", "-n", namespace, "-o",
                              "jsonpath={.data.url}")
        url = base64.b64decode(url).decode()
        assert url.startswith("mysql+aiomysql://") and f"@{release}-mysql.{namespace}.svc:3306/" in url

        # --- a policy applied with kubectl is Accepted by the operator in the pod ------------------------
        policy = f"chart-{secrets.token_hex(4)}"
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump({
            "apiVersion": "trainguard.dev/v1alpha1", "kind": "RecoveryPolicy",
            "metadata": {"name": policy}, "spec": {"mode": "Monitor"}}))
        cluster.wait("Accepted=True on the policy", lambda: _condition(
            cluster.get("recoverypolicy", policy, namespace), "Accepted").get("status") == "True" or None, 180)

        # --- a row written before the upgrade, read after it, after a server restart, after rollback ---
        marker = secrets.token_hex(8)
        _sql(cluster, namespace, mysql["metadata"]["name"],
             f"CREATE TABLE chart_test_marker (v VARCHAR(32)); INSERT INTO chart_test_marker VALUES ('{marker}')")

        def marker_kept(server_pod: str) -> None:
            assert _sql(cluster, namespace, server_pod, "SELECT v FROM chart_test_marker") == [marker]
            assert _sql(cluster, namespace, server_pod, "SELECT version_num FROM alembic_version") == [version]

        done = helm.run("upgrade", release, str(helm_support.CHART), "-n", namespace, "-f", str(values_file),
                        "--set", f"image.tag={UPGRADE_TAG}", "--wait", "--timeout", "10m",
                        kubeconfig=cluster.kubeconfig, timeout=700)
        assert done.returncode == 0, f"{done.stderr}\n{_diagnosis(cluster, namespace)}"
        upgraded = cluster.wait("the upgraded operator pod Ready",
                                lambda: _ready_pod(
            cluster, namespace, operator_selector, lambda p: p["metadata"]["name"] != pod), 180)
        assert upgraded["spec"]["containers"][0]["image"] == f"trainguard:{UPGRADE_TAG}"
        marker_kept(mysql["metadata"]["name"])
        # the server restarted: the entrypoint finds its data directory initialised and keeps it
        old_mysql = mysql["metadata"]["name"]
        old_uid = mysql["metadata"]["uid"]
        cluster.kubectl("delete", "pod", "-n", namespace, old_mysql, "--wait=true", timeout=180)
        restarted = cluster.wait("the MariaDB pod Ready again", lambda: _ready_pod(
            cluster, namespace, mysql_selector, lambda p: p["metadata"]["uid"] != old_uid), 180)
        marker_kept(restarted["metadata"]["name"])
        server_log = cluster.pod_logs(namespace, restarted["metadata"]["name"])
        assert "initialising" not in server_log, server_log

        done = helm.run("rollback", release, "1", "-n", namespace, "--wait", "--timeout", "10m",
                        kubeconfig=cluster.kubeconfig, timeout=700)
        assert done.returncode == 0, f"{done.stderr}\n{_diagnosis(cluster, namespace)}"
        rolled = cluster.wait("the rolled-back operator pod Ready", lambda: _ready_pod(
            cluster, namespace, operator_selector,
            lambda p: p["spec"]["containers"][0]["image"] == "trainguard:dev"), 180)
        assert rolled["status"]["containerStatuses"][0]["restartCount"] == 0
        marker_kept(restarted["metadata"]["name"])
        assert _condition(cluster.get("recoverypolicy", policy, namespace), "Accepted").get("status") == "True"

        # --- helm test: trainguard doctor in a pod, against the same store --------------------------------
        done = helm.run("test", release, "-n", namespace, "--logs", "--timeout", "5m",
                        kubeconfig=cluster.kubeconfig, timeout=400)
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{_diagnosis(cluster, namespace)}"
        doctor = cluster.get("pod", f"{release}-trainguard-doctor", namespace)
        assert doctor is not None and doctor["spec"]["nodeName"] == real_node.name
        assert doctor["status"]["phase"] == "Succeeded"
        report = cluster.pod_logs(namespace, f"{release}-trainguard-doctor")
        assert re.search(rf"^ok\s+database\s+connected to mysql\+aiomysql://trainguard:\*\*\*@{release}-mysql\.",
                         report, re.MULTILINE), report
        assert re.search(rf"^ok\s+database\.schema\s+Alembic revision {version} \(current\)", report,
                         re.MULTILINE), report
        assert re.search(r"^ok\s+database\.writable\s", report, re.MULTILINE), report
        # kubernetes.enabled: the apiserver and the chart's RBAC, from the operator's ServiceAccount
        assert re.search(r"^ok\s+kubernetes\.api\s", report, re.MULTILINE), report
        assert re.search(r"^ok\s+kubernetes\.rbac\s+user system:serviceaccount:", report, re.MULTILINE), report
        assert re.search(r"^(ok|warn)\s+kubernetes\.crds\s", report, re.MULTILINE), report
        print(cluster.kubectl("logs", "-n", namespace, rolled["metadata"]["name"], "-c", "operator", "--tail", "15"))
    finally:
        helm.run("uninstall", release, "-n", namespace, "--wait", "--timeout", "3m",
                 kubeconfig=cluster.kubeconfig, timeout=240)
        cluster.delete_namespace(namespace, wait=180)
