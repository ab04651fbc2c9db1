"""GitOps-clean: what we ship, applied twice with server-side apply, leaves nothing to sync.

A GitOps tool (Argo CD, Flux) applies the rendered manifests over and over and reports any
difference between Git and the cluster as drift. On the real kube-apiserver, each source -- the
CRDs (``crds/``), the install (``kubectl kustomize manifests``), the Slinky variant, the example
RecoveryPolicies (defaults in the CRD schema are filled in by the server), and the Helm chart's
``helm template`` output when ``charts/trainguard`` and ``.local/bin/helm`` exist -- is applied
with ``kubectl apply --server-side`` over and over: the second apply changes no object's content,
a third not even its resourceVersion, and ``kubectl diff --server-side`` is empty. The CRDs keep
status out of spec: both have the status subresource, and no field name is both in spec and in status.

That the operator itself never writes into spec is checked with the running operator in
``tests/e2e/kube/test_argocd_health.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import kube

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.helm, pytest.mark.timeout(kube.BUILD_TIMEOUT_S)]

REPO = Path(__file__).resolve().parents[3]
MANAGER = "gitops-test"
CHART = REPO / "charts" / "trainguard"
HELM = REPO / ".local" / "bin" / "helm"
SOURCES = ["crds", "manifests", "manifests-slinky", "examples", "chart"]


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args}: {done.stderr}"
    return done.stdout


def render(kube_api: kube.LocalKube, source: str) -> str:
    if source == "crds":
        return ok(kube_api.kubectl("kustomize", str(REPO / "crds")))
    if source == "manifests":
        return ok(kube_api.kubectl("kustomize", str(REPO / "manifests")))
    if source == "manifests-slinky":
        return ok(kube_api.kubectl("kustomize", str(REPO / "manifests" / "slinky")))
    if source == "examples":
        return "\n---\n".join(p.read_text() for p in sorted((REPO / "examples").glob("recoverypolicy-*.yaml")))
    if not CHART.is_dir():
        pytest.skip("no Helm chart at charts/trainguard in this checkout")
    if not os.access(HELM, os.X_OK):
        pytest.skip(f"charts/trainguard exists but {HELM} was not built (the chart's hack script builds it)")
    done = subprocess.run([str(HELM), "template", "trainguard", str(CHART), "--namespace", "trainguard-system"],
                          capture_output=True, text=True, timeout=300, check=False)
    return ok(done)


def objects(kube_api: kube.LocalKube, manifest: str) -> dict[str, dict[str, Any]]:
    """kind/namespace/name -> every object of ``manifest`` as the server has it."""
    listing = json.loads(ok(kube_api.kubectl("get", "-f", "-", "-o", "json", "--show-managed-fields",
                                             input=manifest)))
    items = listing.get("items", [listing])
    return {f"{i['kind']}/{i['metadata'].get('namespace', '')}/{i['metadata']['name']}": i for i in items}


def versions(kube_api: kube.LocalKube, manifest: str) -> dict[str, str]:
    """kind/namespace/name -> resourceVersion."""
    return {key: obj["metadata"]["resourceVersion"] for key, obj in objects(kube_api, manifest).items()}


def content(kube_api: kube.LocalKube, manifest: str) -> dict[str, dict[str, Any]]:
    """The objects without their resourceVersion: what a GitOps tool compares."""
    found = objects(kube_api, manifest)
    for obj in found.values():
        obj["metadata"].pop("resourceVersion")
    return found


def apply(kube_api: kube.LocalKube, manifest: str) -> str:
    return ok(kube_api.kubectl("apply", "--server-side", f"--field-manager={MANAGER}", "-f", "-", input=manifest))


@pytest.fixture(scope="module")
def cluster(kube_api: kube.LocalKube) -> kube.LocalKube:
    """The CRDs and the namespaces exist before any source is applied (``slurm``: where Slinky runs
    slurmd, which ``manifests/slinky`` binds in)."""
    apply(kube_api, render(kube_api, "crds"))
    ok(kube_api.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                        "crd/recoverypolicies.trainguard.dev", "crd/workloadrecoveries.trainguard.dev"))
    for namespace in ("trainguard-system", "slurm"):
        apply(kube_api, ok(kube_api.kubectl("create", "namespace", namespace, "--dry-run=client", "-o", "yaml")))
    return kube_api


@pytest.mark.parametrize("source", SOURCES)
def test_applying_twice_changes_nothing_and_diff_is_empty(cluster: kube.LocalKube, source: str) -> None:
    manifest = render(cluster, source)
    assert manifest.strip(), f"{source} rendered nothing"
    apply(cluster, manifest)
    before = content(cluster, manifest)
    apply(cluster, manifest)
    after = content(cluster, manifest)
    assert after == before, f"{source}: the second apply changed {[k for k in after if after[k] != before.get(k)]}"
    diff = cluster.kubectl("diff", "--server-side", f"--field-manager={MANAGER}", "-f", "-", input=manifest)
    assert (diff.returncode, diff.stdout) == (0, ""), f"{source} drifts:\n{diff.stdout}{diff.stderr}"
    # From here on an apply is a true no-op: not even a write. (The first re-apply of a just-created
    # PersistentVolumeClaim may store it once more with identical content: the API server persists the
    # defaults it fills in on read; that is why the step above compares content, not resourceVersions.)
    settled = versions(cluster, manifest)
    apply(cluster, manifest)
    assert versions(cluster, manifest) == settled, f"{source}: a third apply still wrote"


def test_server_defaults_are_the_schema_defaults_and_stay_put(cluster: kube.LocalKube) -> None:
    """A policy applied with only ``mode`` gets the schema's defaults from the server, and applying
    the same file again is a no-op: defaulting happens once, in the schema, never as drift."""
    manifest = ("apiVersion: trainguard.dev/v1alpha1\nkind: RecoveryPolicy\nmetadata:\n  name: gitops-defaults\n"
                "  namespace: trainguard-system\nspec:\n  mode: Monitor\n")
    apply(cluster, manifest)
    obj = objects(cluster, manifest)["RecoveryPolicy/trainguard-system/gitops-defaults"]
    assert obj["spec"]["retries"]["maxRetries"] == 3  # the CRD schema's default, filled by the server
    assert "status" not in obj  # nothing but the operator writes status
    owners = {e["manager"] for e in obj["metadata"]["managedFields"]}
    assert owners == {MANAGER}, owners
    before = content(cluster, manifest)
    apply(cluster, manifest)
    assert content(cluster, manifest) == before


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    return version


@pytest.mark.parametrize("path", sorted((REPO / "crds").glob("*.yaml")), ids=lambda p: p.stem)
def test_status_is_a_subresource_and_never_part_of_spec(path: Path) -> None:
    crd = yaml.safe_load(path.read_text())
    if crd.get("kind") != "CustomResourceDefinition":
        pytest.skip("not a CRD")
    version = _schema(crd)
    assert version.get("subresources", {}).get("status") == {}, "status must be a subresource"
    properties = version["schema"]["openAPIV3Schema"]["properties"]
    spec, status = set(properties["spec"]["properties"]), set(properties["status"]["properties"])
    assert spec and status and not spec & status, spec & status
