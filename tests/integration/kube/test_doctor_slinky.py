"""``trainguard doctor --slinky-namespace NS`` on the real kube-apiserver: slurm-operator's presence,
version and the cordon path, as ``trainguard operator --slinky-namespace`` would need them.

slurm-operator's own CRDs are not cached on this machine unless ``hack/local-kube.sh build --slinky``
ran; the test applies minimal CRDs of the same group, version and plural names
(``slinky.slurm.net/v1beta1`` ``controllers``, ``nodesets``, ``restapis``): discovery is all doctor
reads of them. The apiserver runs no controllers, so slurm-operator is a Deployment object with the
image tag and labels its Helm chart sets, its status written as if it ran; the NodeSet's slurmd pods
and their Nodes are objects as slinky creates them (``<nodeset>-<ordinal>``, the pod-hostname label,
``spec.nodeName``).

- everything in place: every ``slinky.*`` check ok, doctor exits 0;
- slurm-operator v0.4.1 (before the cordon -> drain sync of v1.0.0-rc1): ``slinky.version`` fails;
- slurm-operator with no available replica, a slurmd pod not scheduled: warnings, exit 0;
- no CRDs: ``slinky.crds`` fails;
- a ServiceAccount that may list the pods and read the nodes but not patch them: ``slinky.rbac`` fails
  and names ``patch nodes``;
- an apiserver that accepts connections and never answers: one failed check within the time bound.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import kube
from tests.support.doctor import DoctorRun, migrated_sqlite, run_doctor
from trainguard.k8s import slinky, slinky_probe

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.timeout(300)]

TEST_LABEL = "trainguard.dev/test-crd"
IMAGE = "ghcr.io/slinkyproject/slurm-operator"
PLURALS = {"controllers": "Controller", "nodesets": "NodeSet", "restapis": "RestApi"}
SLINKY_CHECKS = ["slinky.crds", "slinky.operator", "slinky.version", "slinky.pods", "slinky.rbac"]


def _ok(result: Any) -> None:
    assert result.returncode == 0, result.stderr


def _apply(api: kube.LocalKube, *objects: dict[str, Any]) -> None:
    _ok(api.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})))


def _crd(plural: str, kind: str) -> dict[str, Any]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{slinky_probe.GROUP}", "labels": {TEST_LABEL: "slinky"}},
            "spec": {"group": slinky_probe.GROUP, "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
                     "versions": [{"name": "v1beta1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


def _group_served(api: kube.LocalKube) -> bool:
    return api.kubectl("get", "--raw", f"/apis/{slinky_probe.GROUP}").returncode == 0


def _until(check: Any, what: str, within_s: float = 60.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


@pytest.fixture
def slinky_crds(kube_api: kube.LocalKube) -> Iterator[None]:
    """slurm-operator's API group served (minimal CRDs), removed afterwards."""
    _apply(kube_api, *(_crd(plural, kind) for plural, kind in PLURALS.items()))
    _ok(kube_api.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                         *(f"crd/{plural}.{slinky_probe.GROUP}" for plural in PLURALS)))
    _until(lambda: _group_served(kube_api), "the slinky.slurm.net group in discovery")
    try:
        yield
    finally:
        kube_api.kubectl("delete", "crd", "-l", f"{TEST_LABEL}=slinky", "--wait=true", "--timeout=60s")


@dataclass
class Slinky:
    api: kube.LocalKube
    namespace: str
    operator_namespace: str

    def operator(self, tag: str, *, available: bool = True) -> None:
        """slurm-operator's Deployment as its Helm chart names and labels it, shown available (or not)."""
        labels = {"app.kubernetes.io/name": slinky_probe.OPERATOR_NAME, "app.kubernetes.io/instance": "slurm-operator"}
        _apply(self.api, {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "slurm-operator", "namespace": self.operator_namespace,
                         "labels": {**labels, slinky_probe.VERSION_LABEL: tag.removeprefix("v")}},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "manager", "image": f"{IMAGE}:{tag}"}]}}}})
        if not available:
            return
        _ok(self.api.kubectl("patch", "deployment", "slurm-operator", "-n", self.operator_namespace,
                             "--subresource=status", "--type=merge", "-p", json.dumps({"status": {
                                 "replicas": 1, "readyReplicas": 1, "availableReplicas": 1}})))

    def doctor(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kubeconfig: Path | None = None) -> DoctorRun:
        return run_doctor(monkeypatch, "--slinky-namespace", self.namespace,
                          env={"KUBECONFIG": str(kubeconfig or self.api.kubeconfig),
                               "TRAINGUARD_DB_URL": migrated_sqlite(tmp_path)})


@pytest.fixture
def world(kube_api: kube.LocalKube) -> Iterator[Slinky]:
    """A Slinky namespace with a NodeSet's two slurmd pods on their Nodes; the operator's namespace."""
    namespace, operator_namespace = kube.unique_name("slurm"), kube.unique_name("slinky")
    nodes = [kube.unique_name("gpu") for _ in range(2)]
    _ok(kube_api.kubectl("create", "namespace", namespace))
    _ok(kube_api.kubectl("create", "namespace", operator_namespace))
    objects: list[dict[str, Any]] = []
    for ordinal, node in enumerate(nodes):
        pod = f"slinky-{ordinal}"
        objects.append({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}})
        objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": pod, "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "slurmd", slinky.POD_HOSTNAME_LABEL: pod}},
            "spec": {"nodeName": node, "hostname": pod, "automountServiceAccountToken": False,
                     "containers": [{"name": "slurmd", "image": "ghcr.io/slinkyproject/slurmd:25.11"}]}})
    _apply(kube_api, *objects)
    try:
        yield Slinky(kube_api, namespace, operator_namespace)
    finally:
        # no namespace controller: what a test creates, it deletes (the Deployment would stay visible)
        kube_api.kubectl("delete", "deployment", "slurm-operator", "-n", operator_namespace, "--ignore-not-found")
        kube_api.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force", "--wait=false")
        for node in nodes:
            kube_api.kubectl("delete", "node", node, "--wait=false")
        kube_api.kubectl("delete", "namespace", namespace, operator_namespace, "--wait=false")


def _slinky(run: DoctorRun) -> dict[str, tuple[str, str]]:
    return {c["name"]: (c["status"], c["message"]) for c in run.checks if c["name"].startswith("slinky")}


@pytest.mark.usefixtures("slinky_crds")
def test_slurm_operator_present_recent_and_cordon_path_usable(world: Slinky, monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    world.operator("1.0.1")
    run = world.doctor(monkeypatch, tmp_path)
    found = _slinky(run)
    assert list(found) == SLINKY_CHECKS, run.checks
    assert {name: status for name, (status, _m) in found.items()} == dict.fromkeys(SLINKY_CHECKS, "ok"), found
    assert "controllers, nodesets, restapis" in found["slinky.crds"][1]
    assert f"{world.operator_namespace}/slurm-operator (1/1 available)" in found["slinky.operator"][1]
    assert "all namespaces" in found["slinky.operator"][1]
    assert "slurm-operator 1.0.1 (image ghcr.io/slinkyproject/slurm-operator:1.0.1)" in found["slinky.version"][1]
    assert f"2 of 2 slurmd pods in {world.namespace}" in found["slinky.pods"][1]
    assert "patch nodes" in found["slinky.rbac"][1]
    assert run.code == 0, run.failed()


@pytest.mark.usefixtures("slinky_crds")
def test_a_slurm_operator_before_the_cordon_sync_fails(world: Slinky, monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    world.operator("0.4.1")
    run = world.doctor(monkeypatch, tmp_path)
    status, message = _slinky(run)["slinky.version"]
    assert status == "fail" and "0.4.1" in message and "predates 1.0.0-rc1" in message, message
    assert "upgrade slurm-operator" in run.check("slinky.version")["fix"]
    assert run.failed() == ["slinky.version"] and run.code == 1


@pytest.mark.usefixtures("slinky_crds")
def test_an_operator_not_running_and_an_unscheduled_pod_are_warnings(world: Slinky, monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    world.operator("v1.0.1", available=False)
    _apply(world.api, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "slinky-2", "namespace": world.namespace,
        "labels": {"app.kubernetes.io/name": "slurmd", slinky.POD_HOSTNAME_LABEL: "slinky-2"}},
        "spec": {"hostname": "slinky-2", "automountServiceAccountToken": False,
                 "containers": [{"name": "slurmd", "image": "ghcr.io/slinkyproject/slurmd:25.11"}]}})
    run = world.doctor(monkeypatch, tmp_path)
    found = _slinky(run)
    assert found["slinky.operator"][0] == "warn" and "0/1 available" in found["slinky.operator"][1], found
    assert found["slinky.version"][0] == "ok" and "v1.0.1" in found["slinky.version"][1], found
    assert found["slinky.pods"][0] == "warn", found
    assert "2 of 3 slurmd pods" in found["slinky.pods"][1] and "not scheduled: slinky-2" in found["slinky.pods"][1]
    assert run.code == 0, run.failed()


def test_without_slurm_operators_crds_doctor_fails(world: Slinky, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    crds = world.api.kubectl("get", "crd", "-o", "name")
    _ok(crds)
    if any(line.endswith("." + slinky_probe.GROUP) for line in crds.stdout.split()):
        pytest.skip(f"{slinky_probe.GROUP} CRDs are installed here (a Slinky cluster): cannot test without")
    _until(lambda: not _group_served(world.api), f"{slinky_probe.GROUP} gone from discovery")
    world.operator("1.0.1")
    run = world.doctor(monkeypatch, tmp_path)
    status, message = _slinky(run)["slinky.crds"]
    assert status == "fail" and f"{slinky_probe.GROUP} is not served" in message, message
    assert "install slurm-operator's CRDs" in run.check("slinky.crds")["fix"]
    assert run.failed() == ["slinky.crds"] and run.code == 1


@pytest.mark.usefixtures("slinky_crds")
def test_credentials_that_may_not_patch_nodes_fail(world: Slinky, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """A ServiceAccount with everything of the cordon path but patch on nodes (and no Deployments)."""
    world.operator("1.0.1")
    sa, api = kube.unique_name("doctor"), world.api
    _ok(api.kubectl("create", "serviceaccount", sa, "-n", world.namespace))
    _ok(api.kubectl("create", "role", sa, "-n", world.namespace, "--verb=list", "--resource=pods"))
    _ok(api.kubectl("create", "rolebinding", sa, "-n", world.namespace, f"--role={sa}",
                    f"--serviceaccount={world.namespace}:{sa}"))
    _ok(api.kubectl("create", "clusterrole", sa, "--verb=get,list", "--resource=nodes"))
    _ok(api.kubectl("create", "clusterrolebinding", sa, f"--clusterrole={sa}",
                    f"--serviceaccount={world.namespace}:{sa}"))
    try:
        kubeconfig = api.service_account_kubeconfig(sa, world.namespace, tmp_path / "sa.kubeconfig")
        run = world.doctor(monkeypatch, tmp_path, kubeconfig)
    finally:
        api.kubectl("delete", "clusterrolebinding", sa, "--wait=false")
        api.kubectl("delete", "clusterrole", sa, "--wait=false")
    found = _slinky(run)
    status, message = found["slinky.rbac"]
    assert status == "fail" and "may not patch nodes (cluster)" in message, message
    assert "manifests/slinky" in run.check("slinky.rbac")["fix"]
    assert found["slinky.pods"][0] == "ok" and found["slinky.crds"][0] == "ok", found
    # Deployments in all namespaces are not this identity's to list: a warning saying so, never a failure
    assert found["slinky.operator"][0] == "warn" and "cannot list" in found["slinky.operator"][1], found
    assert run.failed() == ["slinky.rbac"] and run.code == 1


def test_an_apiserver_that_never_answers_is_one_failed_check_in_time(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    """A socket that listens and never accepts: the kernel completes each connection, nothing answers."""
    with socket.socket() as stalled:
        stalled.bind(("127.0.0.1", 0))
        stalled.listen(16)
        url = f"http://127.0.0.1:{stalled.getsockname()[1]}"
        kubeconfig = tmp_path / "stalled.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "stalled",
            "clusters": [{"name": "stalled", "cluster": {"server": url}}],
            "users": [{"name": "stalled", "user": {"token": "x"}}],
            "contexts": [{"name": "stalled", "context": {"cluster": "stalled", "user": "stalled"}}]}))
        run = run_doctor(monkeypatch, "--slinky-namespace", "slurm", "--check-timeout", "1",
                         env={"KUBECONFIG": str(kubeconfig), "TRAINGUARD_DB_URL": migrated_sqlite(tmp_path)})
    found = _slinky(run)
    assert list(found) == ["slinky.crds"], run.checks
    status, message = found["slinky.crds"]
    assert status == "fail" and "no answer within 1 s" in message, message
    assert run.failed() == ["slinky.crds"] and run.code == 1
