"""The shipped Kubernetes artefacts are accepted by a real API server, as users apply them.

`kubectl apply -f crds/` (the CRDs alone) and `kubectl apply --dry-run=server -k manifests/`
(everything, checked by the server's admission and schema validation without persisting).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import kube

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.timeout(kube.BUILD_TIMEOUT_S)]

REPO = Path(__file__).resolve().parents[3]


def test_kubectl_apply_f_crds_is_accepted(kube_api: kube.LocalKube) -> None:
    done = kube_api.kubectl("apply", "-f", str(REPO / "crds"))
    assert done.returncode == 0, done.stderr
    applied = done.stdout
    assert "recoverypolicies.trainguard.dev" in applied
    assert "workloadrecoveries.trainguard.dev" in applied
    wait = kube_api.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        "crd/recoverypolicies.trainguard.dev", "crd/workloadrecoveries.trainguard.dev",
    )
    assert wait.returncode == 0, wait.stderr
    # `kubectl get recoveries` resolves to our WorkloadRecovery kind.
    listing = kube_api.kubectl("get", "recoveries", "-A")
    assert listing.returncode == 0, listing.stderr


def test_manifests_pass_server_side_dry_run(kube_api: kube.LocalKube) -> None:
    rendered = kube_api.kubectl("kustomize", str(REPO / "manifests"))
    assert rendered.returncode == 0, rendered.stderr
    # A server-side dry run of namespaced objects needs their namespace to exist.
    namespaces = kube_api.kubectl("create", "namespace", "trainguard-system", "--dry-run=client", "-o", "yaml")
    assert namespaces.returncode == 0, namespaces.stderr
    created = kube_api.kubectl("apply", "-f", "-", input=namespaces.stdout)
    assert created.returncode == 0, created.stderr
    crds = kube_api.kubectl("apply", "-f", str(REPO / "crds"))
    assert crds.returncode == 0, crds.stderr
    dry = kube_api.kubectl("apply", "--dry-run=server", "-k", str(REPO / "manifests"))
    assert dry.returncode == 0, dry.stderr
    assert "(server dry run)" in dry.stdout
