"""``trainguard doctor`` with ``TRAINGUARD_SCHEDULER=kubernetes`` on the real kube-apiserver: the
apiserver, the RBAC the operator needs and the CRDs, as the chart's ``helm test`` pod asks them.

The ServiceAccount is granted the rules of ``k8s.rbac`` (features ``core`` and ``kubernetes``, the
table the shipped manifests and the chart's Roles are generated from): cluster rules by a
ClusterRole, served and workload rules by a Role in the one served namespace.

- the shipped rules: ``kubernetes.api``, ``kubernetes.rbac`` and ``kubernetes.crds`` ok, exit 0;
- the shipped rules but ``patch`` on JobSets: ``kubernetes.rbac`` fails naming it, the user and the manifest;
- an apiserver on a closed port, or one that accepts connections and never answers: one failed
  ``kubernetes.api`` check, nothing else asked.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import kube
from tests.support.doctor import DoctorRun, migrated_sqlite, run_doctor
from tests.support.kubejobs import install_workload_crds
from trainguard.k8s import rbac

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[3]
CHECKS = ["kubernetes.api", "kubernetes.rbac", "kubernetes.crds"]


def _ok(result: Any) -> None:
    assert result.returncode == 0, result.stderr


def _apply(api: kube.LocalKube, *objects: dict[str, Any]) -> None:
    _ok(api.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})))


def _kube(run: DoctorRun) -> dict[str, tuple[str, str]]:
    return {c["name"]: (c["status"], c["message"]) for c in run.checks if c["name"].startswith("kubernetes")}


@pytest.fixture
def namespace(kube_api: kube.LocalKube) -> Iterator[str]:
    """A served namespace, with our CRDs and the JobSet / PyTorchJob CRDs installed."""
    _ok(kube_api.kubectl("apply", "-k", str(REPO / "crds")))
    install_workload_crds(kube_api)
    name = kube.unique_name("served")
    _ok(kube_api.kubectl("create", "namespace", name))
    try:
        yield name
    finally:
        kube_api.kubectl("delete", "namespace", name, "--wait=false")


@contextlib.contextmanager
def _service_account(api: kube.LocalKube, namespace: str, tmp_path: Path, *,
                     without: tuple[str, str] | None = None) -> Iterator[Path]:
    """A ServiceAccount granted the shipped rules of features core + kubernetes (less ``without``:
    (resource, verb)); yields its kubeconfig, then removes the cluster-wide objects."""
    sa = kube.unique_name("doctor")
    rules = rbac.rules_for(["core", "kubernetes"])
    if without:
        for rule in [r for scope in rules.values() for r in scope if r["resources"] == [without[0]]]:
            rule["verbs"] = [v for v in rule["verbs"] if v != without[1]]
    meta = {"name": sa, "namespace": namespace}
    subject = [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]
    _apply(api, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
           {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": sa},
            "rules": rules["cluster"]},
           {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": sa},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": sa},
            "subjects": subject},
           {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
            "rules": rules["served"] + rules["workload"]},
           {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa}, "subjects": subject})
    try:
        yield api.service_account_kubeconfig(sa, namespace, tmp_path / f"{sa}.kubeconfig")
    finally:
        api.kubectl("delete", "clusterrolebinding,clusterrole", sa, "--wait=false")


def _doctor(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kubeconfig: Path, namespace: str,
            *args: str) -> DoctorRun:
    return run_doctor(monkeypatch, *args, env={
        "KUBECONFIG": str(kubeconfig), "TRAINGUARD_SCHEDULER": "kubernetes", "TRAINGUARD_NAMESPACE": namespace,
        "TRAINGUARD_DB_URL": migrated_sqlite(tmp_path)})


def test_the_shipped_rules_pass_every_kubernetes_check(kube_api: kube.LocalKube, namespace: str,
                                                       monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with _service_account(kube_api, namespace, tmp_path) as kubeconfig:
        run = _doctor(monkeypatch, tmp_path, kubeconfig, namespace)
    found = _kube(run)
    assert list(found) == CHECKS, run.checks
    assert {name: status for name, (status, _m) in found.items()} == dict.fromkeys(CHECKS, "ok"), found
    assert "Kubernetes v1." in found["kubernetes.api"][1]
    assert f"system:serviceaccount:{namespace}:" in found["kubernetes.rbac"][1]
    assert f"served: {namespace}; workload namespace: {namespace}" in found["kubernetes.rbac"][1]
    assert "JobSet, PyTorchJob" in found["kubernetes.crds"][1]
    assert run.code == 0, run.failed()


def test_a_missing_permission_fails_naming_it(kube_api: kube.LocalKube, namespace: str,
                                              monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with _service_account(kube_api, namespace, tmp_path, without=("jobsets", "patch")) as kubeconfig:
        run = _doctor(monkeypatch, tmp_path, kubeconfig, namespace)
    status, message = _kube(run)["kubernetes.rbac"]
    assert status == "fail", message
    assert f"user system:serviceaccount:{namespace}:doctor-" in message, message
    assert f"may not patch jobsets.jobset.x-k8s.io in {namespace} (" in message, message
    assert "manifests/kubernetes/rbac.yaml" in run.check("kubernetes.rbac")["fix"]
    assert run.failed() == ["kubernetes.rbac"] and run.code == 1


@pytest.mark.parametrize("listening", [False, True], ids=["closed-port", "never-answers"])
def test_an_unreachable_apiserver_is_one_failed_check(listening: bool, monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    """A closed port refuses at once; a socket that listens and never accepts is bounded by --check-timeout."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        if listening:
            server.listen(16)
        else:
            server.close()
        kubeconfig = tmp_path / "unreachable.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "gone",
            "clusters": [{"name": "gone", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "gone", "user": {"token": "x"}}],
            "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "gone"}}]}))
        run = _doctor(monkeypatch, tmp_path, kubeconfig, "default", "--check-timeout", "1")
    found = _kube(run)
    assert list(found) == ["kubernetes.api"], run.checks
    status, message = found["kubernetes.api"]
    assert status == "fail" and f"127.0.0.1:{port}" in message, message
    if listening:
        assert "no answer within 1 s" in message, message
    assert run.failed() == ["kubernetes.api"] and run.code == 1
