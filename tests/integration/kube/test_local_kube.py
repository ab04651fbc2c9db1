"""The local Kubernetes API (hack/local-kube.sh) is a real one: core API, CRDs, RBAC.

These tests guard the infrastructure the operator tests stand on: if the build, the
certificates, the token file or the ServiceAccount signing keys break, they fail here with
a plain message instead of deep inside a kopf test.
"""

from __future__ import annotations

import json
import os
import re
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from base64 import b64decode
from pathlib import Path

import pytest

from tests.support import kube

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.timeout(kube.BUILD_TIMEOUT_S)]

CRD_GROUP = "localkube-test.trainguard.dev"
CRD = f"""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: probes.{CRD_GROUP}
spec:
  group: {CRD_GROUP}
  scope: Namespaced
  names: {{plural: probes, singular: probe, kind: Probe}}
  versions:
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - {{name: Replicas, type: integer, jsonPath: .spec.replicas}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [replicas]
            properties:
              replicas: {{type: integer, minimum: 0}}
"""

# RBAC is served from an informer cache: a new RoleBinding takes effect within moments,
# not instantly. Bounded poll, real time (this is an integration test).
RBAC_PROPAGATION_S = 30.0


def pinned_version() -> str:
    gomod = (kube.REPO_ROOT / "tools" / "kube" / "go.mod").read_text()
    found = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", gomod, re.M)
    assert found, "tools/kube/go.mod does not require k8s.io/kubernetes"
    return found.group(1)


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args} failed: {done.stderr}"
    return str(done.stdout)


def http_get(api: kube.LocalKube, path: str, token: str) -> tuple[int, bytes]:
    """GET on the API with a bearer token, verifying the server against our CA."""
    context = ssl.create_default_context(cadata=b64decode(api.ca_data).decode())
    request = urllib.request.Request(api.server + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


@pytest.fixture
def namespace(kube_api: kube.LocalKube) -> str:
    name = kube.unique_name("tg-kube")
    ok(kube_api.kubectl("create", "namespace", name))
    return name


def test_core_api_answers_with_the_pinned_version(kube_api: kube.LocalKube) -> None:
    names = ok(kube_api.kubectl("get", "namespaces", "-o", "name")).split()
    assert "namespace/default" in names
    assert "namespace/kube-system" in names

    versions = json.loads(ok(kube_api.kubectl("version", "-o", "json")))
    assert versions["serverVersion"]["gitVersion"] == pinned_version()
    assert versions["clientVersion"]["gitVersion"] == pinned_version()


def test_crd_is_served_validated_and_listed(kube_api: kube.LocalKube, namespace: str) -> None:
    ok(kube_api.kubectl("apply", "-f", "-", input=CRD))
    ok(kube_api.kubectl("wait", "--for=condition=Established", f"crd/probes.{CRD_GROUP}", "--timeout=60s"))

    probe = {"apiVersion": f"{CRD_GROUP}/v1", "kind": "Probe", "metadata": {"name": "first"}, "spec": {"replicas": 3}}
    ok(kube_api.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(probe)))

    listed = json.loads(ok(kube_api.kubectl("get", f"probes.{CRD_GROUP}", "-n", namespace, "-o", "json")))
    assert [(p["metadata"]["name"], p["spec"]) for p in listed["items"]] == [("first", {"replicas": 3})]

    table = ok(kube_api.kubectl("get", f"probes.{CRD_GROUP}", "-n", namespace)).splitlines()
    assert table[0].split()[:2] == ["NAME", "REPLICAS"]
    assert table[1].split()[:2] == ["first", "3"]

    bad = {**probe, "metadata": {"name": "negative"}, "spec": {"replicas": -1}}
    refused = kube_api.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(bad))
    assert refused.returncode != 0
    assert "spec.replicas" in refused.stderr


def test_rbac_forbids_a_bare_service_account_until_a_role_is_bound(
    kube_api: kube.LocalKube, namespace: str, tmp_path: Path
) -> None:
    ok(kube_api.kubectl("create", "serviceaccount", "reader", "-n", namespace))
    token = kube_api.create_token("reader", namespace)
    pods = f"/api/v1/namespaces/{namespace}/pods"

    status, body = http_get(kube_api, pods, token)
    assert status == 403, body
    assert json.loads(body)["reason"] == "Forbidden"
    sa_kubeconfig = kube_api.write_token_kubeconfig(token, tmp_path / "reader.kubeconfig")
    denied = kube_api.kubectl("get", "pods", "-n", namespace, kubeconfig=sa_kubeconfig)
    assert denied.returncode != 0
    assert "Forbidden" in denied.stderr

    ok(kube_api.kubectl("create", "role", "pod-reader", "--verb=get,list", "--resource=pods", "-n", namespace))
    ok(
        kube_api.kubectl(
            "create",
            "rolebinding",
            "reader-pods",
            "--role=pod-reader",
            f"--serviceaccount={namespace}:reader",
            "-n",
            namespace,
        )
    )
    deadline = time.monotonic() + RBAC_PROPAGATION_S
    while (status := http_get(kube_api, pods, token)[0]) == 403 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status == 200
    ok(kube_api.kubectl("get", "pods", "-n", namespace, kubeconfig=sa_kubeconfig))

    # The Role is namespaced: other namespaces stay closed.
    assert http_get(kube_api, "/api/v1/namespaces/default/pods", token)[0] == 403


def test_a_forged_token_is_rejected(kube_api: kube.LocalKube) -> None:
    status, _ = http_get(kube_api, "/api/v1/namespaces", "not-" + kube_api.admin_token)
    assert status == 401
    assert http_get(kube_api, "/api/v1/namespaces", kube_api.admin_token)[0] == 200


def test_up_again_is_harmless(kube_api: kube.LocalKube) -> None:
    pid_file = kube_api.state_dir / "kube-apiserver.pid"
    before = pid_file.read_text()
    again = kube.run_script("up", timeout=120)
    assert again.returncode == 0, again.stderr
    assert pid_file.read_text() == before
    assert kube.run_script("status", timeout=60).returncode == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def script_env(state_dir: Path, **ports: int) -> dict[str, str]:
    return {**os.environ, "TG_KUBE_DIR": str(state_dir), **{k: str(v) for k, v in ports.items()}}


def test_second_instance_starts_and_down_leaves_no_process(kube_api: kube.LocalKube, tmp_path: Path) -> None:
    """A second, private instance (own dir and ports) reuses the cached build; `down` stops all of it."""
    env = script_env(
        tmp_path / "kube", TG_KUBE_API_PORT=free_port(), TG_ETCD_PORT=free_port(), TG_ETCD_PEER_PORT=free_port()
    )

    def script(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(kube.SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300, check=False
        )

    try:
        up = script("up")
        assert up.returncode == 0, up.stderr
        pids = [int((tmp_path / "kube" / f"{n}.pid").read_text()) for n in ("etcd", "kube-apiserver")]
        assert script("status").returncode == 0
        other = kube.LocalKube.load(tmp_path / "kube")
        assert other.server != kube_api.server
        assert ok(other.kubectl("get", "namespace", "default", "-o", "name")).strip() == "namespace/default"
    finally:
        down = script("down", "--wipe")
    assert down.returncode == 0, down.stderr
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists(), f"pid {pid} still running after down"
    assert script("status").returncode == 1
    assert not (tmp_path / "kube" / "kubeconfig").exists()


@pytest.mark.parametrize(
    ("name", "value"),
    [("TG_KUBE_API_PORT", "not-a-port"), ("TG_ETCD_PORT", "the API port")],
)
def test_bad_settings_get_a_clear_error(tmp_path: Path, name: str, value: str) -> None:
    if value == "the API port":  # a clash with the API port in effect (the default or the run's own)
        value = os.environ.get("TG_KUBE_API_PORT", "16443")
    env = {**os.environ, "TG_KUBE_DIR": str(tmp_path), name: value}
    done = subprocess.run([str(kube.SCRIPT), "up"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "ERROR:" in done.stderr
    assert name in done.stderr
    assert not any(tmp_path.iterdir()), "nothing is started or written on bad settings"
