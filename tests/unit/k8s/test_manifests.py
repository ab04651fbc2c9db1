"""manifests/: renders offline, every object valid for Kubernetes 1.36, RBAC least privilege,
the Deployment locked down and in Monitor mode by default.

Rendering: a small kustomize reader in Python (resources: files and directories, nothing else) is
always used; when the kubectl that hack/local-kube.sh builds is present, ``kubectl kustomize`` must
render the same objects.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from trainguard.k8s import rbac

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = REPO / "manifests"
KUBE_VERSION = "1.36.0"
NAMESPACE = "trainguard-system"
SERVICE_ACCOUNT = "trainguard"
KUSTOMIZATIONS = [MANIFESTS, MANIFESTS / "slinky", MANIFESTS / "kubernetes"]
ALLOWED_KUSTOMIZE_KEYS = {"apiVersion", "kind", "resources"}


def kubectl() -> Path | None:
    """kubectl from hack/local-kube.sh (TG_KUBE_DIR), else one on PATH."""
    built = Path(os.environ.get("TG_KUBE_DIR", REPO / ".local" / "kube")) / "bin" / "kubectl"
    if built.exists():
        return built
    found = shutil.which("kubectl")
    return Path(found) if found else None


def render(root: Path) -> list[dict[str, Any]]:
    """The objects of the kustomization at ``root``: our kustomizations only list resources."""
    name = next(n for n in ("kustomization.yaml", "Kustomization") if (root / n).exists())
    with (root / name).open(encoding="utf-8") as stream:
        kustomization = yaml.safe_load(stream)
    assert set(kustomization) <= ALLOWED_KUSTOMIZE_KEYS, f"{root}: this reader does not apply transformers"
    objects: list[dict[str, Any]] = []
    for entry in kustomization["resources"]:
        path = (root / entry).resolve()
        if path.is_dir():
            objects.extend(render(path))
        else:
            with path.open(encoding="utf-8") as stream:
                objects.extend(doc for doc in yaml.safe_load_all(stream) if doc is not None)
    return objects


def key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return render(MANIFESTS)


@pytest.mark.parametrize("root", KUSTOMIZATIONS, ids=lambda path: path.name)
def test_renders_without_duplicates(root: Path) -> None:
    objects = render(root)
    keys = [key(obj) for obj in objects]
    assert len(keys) == len(set(keys))
    kinds = {obj["kind"] for obj in objects}
    assert {"Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Deployment"} <= kinds


@pytest.mark.kube  # the kubectl hack/local-kube.sh builds (hack/test.sh runs these once it is built)
@pytest.mark.parametrize("root", KUSTOMIZATIONS, ids=lambda path: path.name)
def test_kubectl_kustomize_renders_the_same_objects(root: Path) -> None:
    binary = kubectl()
    if binary is None:
        pytest.skip("no kubectl: run hack/local-kube.sh build (or put kubectl on PATH) to check real kustomize")
    done = subprocess.run(
        [str(binary), "kustomize", str(root)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    rendered = {key(obj): obj for obj in yaml.safe_load_all(done.stdout) if obj is not None}
    ours = {key(obj): obj for obj in render(root)}
    assert rendered == ours


@pytest.mark.parametrize("root", KUSTOMIZATIONS, ids=lambda path: path.name)
def test_every_object_is_valid_kubernetes(root: Path) -> None:
    for obj in render(root):
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def test_namespaced_objects_live_in_our_namespace(base: list[dict[str, Any]]) -> None:
    cluster_scoped = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    for obj in base:
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], key(obj)
        else:
            assert obj["metadata"]["namespace"] == NAMESPACE, key(obj)
    assert [ns["metadata"]["name"] for ns in by_kind(base, "Namespace")] == [NAMESPACE]


def rules(objects: list[dict[str, Any]], role: str) -> set[tuple[str, str, str]]:
    (cluster_role,) = [obj for obj in by_kind(objects, "ClusterRole") if obj["metadata"]["name"] == role]
    return {
        (group, resource, verb)
        for rule in cluster_role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_rbac_has_no_wildcards(base: list[dict[str, Any]]) -> None:
    for role in by_kind(base, "ClusterRole") + by_kind(base, "Role"):
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule and "resourceNames" not in rule
            for field in ("apiGroups", "resources", "verbs"):
                assert not any("*" in value for value in rule[field]), (role["metadata"]["name"], rule)


def test_operator_role_is_exactly_what_the_operator_uses(base: list[dict[str, Any]]) -> None:
    # the permission table of the features this install runs with (--all-namespaces, standalone)
    granted = rules(base, "trainguard-operator")
    expected = {(group, resource, verb) for scope, group, resource, verb in rbac.granted(["core", "allNamespaces"])
                if scope in ("cluster", "served")}
    assert granted == expected
    # never: secrets, pod exec/delete, deleting nodes, changing policies
    assert not {resource for _group, resource, _verb in granted} & {"secrets", "pods", "pods/exec", "configmaps"}
    assert ("", "nodes", "delete") not in granted
    assert ("trainguard.dev", "recoverypolicies", "delete") not in granted


def test_roles_are_bound_to_our_service_account_only(base: list[dict[str, Any]]) -> None:
    (account,) = by_kind(base, "ServiceAccount")
    assert (account["metadata"]["name"], account["metadata"]["namespace"]) == (SERVICE_ACCOUNT, NAMESPACE)
    slinky = render(MANIFESTS / "slinky")
    for binding in by_kind(slinky, "ClusterRoleBinding") + by_kind(slinky, "RoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]
    pods_bindings = [obj for obj in slinky if obj.get("roleRef", {}).get("name") == "trainguard-slinky-pods"]
    assert [binding["kind"] for binding in pods_bindings] == ["RoleBinding"], "pod access must stay per namespace"
    assert rules(slinky, "trainguard-slinky-pods") == {("", "pods", "list")}
    assert rules(slinky, "trainguard-slinky-nodes") == {("", "nodes", verb) for verb in ("get", "list", "patch")}
    assert not [obj for obj in base if obj.get("roleRef", {}).get("name") == "trainguard-slinky-pods"]


def test_kubernetes_workload_role_is_exactly_what_the_adapter_uses() -> None:
    objects = render(MANIFESTS / "kubernetes")
    read = ("get", "list", "watch")
    assert rules(objects, "trainguard-kubernetes-workloads") == {
        *(("jobset.x-k8s.io", "jobsets", verb) for verb in (*read, "patch")),
        *(("kubeflow.org", "pytorchjobs", verb) for verb in (*read, "patch")),
        ("", "pods", "list"), ("", "pods", "watch"),
        ("", "pods/log", "get"),
        # Node conditions as evidence, cordon + our taint (the base install grants no Node access)
        *(("", "nodes", verb) for verb in (*read, "patch")),
    }
    (binding,) = [obj for obj in by_kind(objects, "ClusterRoleBinding")
                  if obj["roleRef"]["name"] == "trainguard-kubernetes-workloads"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]


def operator_container(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    (deployment,) = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def test_deployment_is_locked_down(base: list[dict[str, Any]]) -> None:
    (deployment,) = by_kind(base, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod, container = operator_container(base)
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context.get("privileged", False) is False
    assert "memory" in container["resources"]["limits"] and "cpu" in container["resources"]["requests"]
    image = container["image"]
    assert "/" not in image.split(":")[0] or "." not in image.split("/")[0], "no registry host in the repository"


def test_deployment_runs_the_operator_in_monitor_mode(base: list[dict[str, Any]]) -> None:
    _pod, container = operator_container(base)
    assert [*container["command"], *container["args"][:1]] == ["trainguard", "operator"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["TRAINGUARD_MODE"] == "monitor"


def test_probes_hit_the_endpoints_the_operator_serves(base: list[dict[str, Any]]) -> None:
    """Liveness and start-up on /healthz, readiness on /readyz, at the port of TRAINGUARD_HTTP_LISTEN
    (what the operator really serves from these settings: test_manifest_config.py)."""
    _pod, container = operator_container(base)
    env = {item["name"]: item.get("value") for item in container["env"]}
    port_number = int(env["TRAINGUARD_HTTP_LISTEN"].rsplit(":", 1)[1])
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    paths = {"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    for probe, path in paths.items():
        http = container[probe]["httpGet"]
        assert http["path"] == path, probe
        assert ports[http["port"]] == port_number, probe


def test_writable_paths_are_volumes(base: list[dict[str, Any]]) -> None:
    pod, container = operator_container(base)
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["TRAINGUARD_HOME"] in mounts, "the audit database must not be on the read-only root"
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    claim = volumes[mounts[env["TRAINGUARD_HOME"]]]["persistentVolumeClaim"]["claimName"]
    assert claim in {obj["metadata"]["name"] for obj in by_kind(base, "PersistentVolumeClaim")}
    assert "/tmp" in mounts
