"""Services and cluster DNS on the real node (issue 26): kube-proxy (iptables mode) and CoreDNS, both
built from the Go module registry, as ``hack/local-kube.sh up --cluster --real-node`` runs them.

A web server (busybox httpd) runs in a pod on ``real-node-1`` behind a ClusterIP Service; a second pod
there (the operator image's Python: glibc's resolver) resolves the Service's cluster-local name through
the kubelet's clusterDNS (the kube-dns Service at 10.0.0.10, routed by kube-proxy to CoreDNS) and fetches
the page through the Service IP (routed by kube-proxy to the server pod). The ``kubernetes`` Service,
which kube-proxy leaves to the forwarder's DNAT, is what the chart's operator pod talks to
(test_chart_real_node.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support import kube_cluster
from tests.support.real_node import BUSYBOX_IMAGE, OPERATOR_IMAGE, RealNode

pytestmark = [pytest.mark.integration, pytest.mark.kube_cluster, pytest.mark.real_node,
              pytest.mark.timeout(kube_cluster.BUILD_TIMEOUT_S)]

UID = 4242
DNS_IP = "10.0.0.10"


def busybox_pod(name: str, node: str, script: str, *, restart: str = "Never",
                labels: dict[str, str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": ["/bin/sh", "-c", script],
        "resources": {"limits": {"memory": "32Mi", "cpu": "200m"}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    volumes: list[dict[str, Any]] = []
    if restart == "Always":  # a server: Ready once it listens on 8080; its pages in an emptyDir
        container["readinessProbe"] = {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
        container["volumeMounts"] = [{"name": "www", "mountPath": "/www"}]
        volumes.append({"name": "www", "emptyDir": {}})
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node}, "restartPolicy": restart,
            "automountServiceAccountToken": False,
            "securityContext": {"runAsUser": UID, "runAsGroup": UID, "runAsNonRoot": True,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container], "volumes": volumes,
        },
    }


@pytest.fixture
def namespace(real_node: RealNode) -> Any:
    name = real_node.cluster.create_namespace("net")
    try:
        yield name
    finally:
        real_node.cluster.delete_namespace(name, wait=120)


def test_a_pod_resolves_a_service_name_and_reaches_it_through_kube_proxy(real_node: RealNode, namespace: str) -> None:
    cluster = real_node.cluster
    server = busybox_pod("web", real_node.name,
                         "echo \"served-by-$(hostname)\" > /www/index.html && exec httpd -f -p 8080 -h /www",
                         restart="Always", labels={"app": "web"})
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                          "items": [server, service]}))

    def server_ready() -> dict[str, Any] | None:
        obj = cluster.get("pod", "web", namespace)
        conditions = (obj or {}).get("status", {}).get("conditions") or []
        return obj if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) else None

    web = cluster.wait("the web pod to be Ready", server_ready, timeout=180)
    cluster_ip = (cluster.get("service", "web", namespace) or {})["spec"]["clusterIP"]
    name = f"web.{namespace}.svc.cluster.local"
    # The client: glibc's resolver (the operator image's Python; Debian's static busybox cannot resolve
    # names outside its nslookup). kube-proxy programs the Service's endpoint shortly after the pod
    # turns Ready: the first request waits for an answer (bounded), every later one must succeed.
    script = "\n".join([
        "import socket, time, urllib.request",
        "print(open('/etc/resolv.conf').read())",
        f"print('resolved=' + socket.getaddrinfo({name!r}, 80, proto=socket.IPPROTO_TCP)[0][4][0])",
        "print('short=' + socket.getaddrinfo('web', 80, proto=socket.IPPROTO_TCP)[0][4][0])",
        "def get(url):",
        "    return urllib.request.urlopen(url, timeout=5).read().decode().strip()",
        "for attempt in range(60):",
        "    try:",
        f"        first = get('http://{name}/')",
        "        break",
        "    except OSError:",
        "        time.sleep(1)",
        "else:",
        "    raise SystemExit('no answer through the Service in 60 tries')",
        "print('first=' + first)",
        "print('by-short-name=' + get('http://web/'))",
        f"print('by-ip=' + get('http://{cluster_ip}/'))",
    ])
    client = busybox_pod("client", real_node.name, "")
    client["spec"]["containers"][0].update({"image": OPERATOR_IMAGE, "command": ["python3", "-c", script]})
    client["spec"]["containers"][0]["resources"]["limits"]["memory"] = "128Mi"
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(client))

    def client_done() -> dict[str, Any] | None:
        obj = cluster.get("pod", "client", namespace)
        statuses = (obj or {}).get("status", {}).get("containerStatuses") or []
        return statuses[0]["state"].get("terminated") if statuses else None

    terminated = cluster.wait("the client pod to finish", client_done, timeout=180)
    log = cluster.pod_logs(namespace, "client")
    assert terminated["exitCode"] == 0, (terminated, log)
    lines = log.splitlines()
    assert f"nameserver {DNS_IP}" in lines, log  # the kubelet's clusterDNS: the kube-dns Service
    assert f"search {namespace}.svc.cluster.local svc.cluster.local cluster.local" in lines, log
    assert f"resolved={cluster_ip}" in lines, log  # CoreDNS's answer: the Service's ClusterIP
    assert f"short={cluster_ip}" in lines, log  # through the search path
    page = f"served-by-{web['metadata']['name']}"
    assert {f"first={page}", f"by-short-name={page}", f"by-ip={page}"} <= set(lines), log
