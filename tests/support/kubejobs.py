"""The upstream JobSet and PyTorchJob CRDs on the local kube-apiserver, for the adapter's tests.

The CRDs come from the released modules themselves (``go mod download`` of JobSet v0.10.1 and the
Kubeflow training-operator v1.8.1, the versions the simulated cluster runs), so the adapter is
tested against the real schemas, not a copy. JobSet's CRD is too large for client-side apply:
server-side apply.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .kube import LocalKube

MODULES = {
    "sigs.k8s.io/jobset@v0.10.1": "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",
    "github.com/kubeflow/training-operator@v1.8.1": "manifests/base/crds/kubeflow.org_pytorchjobs.yaml",
}


def module_file(module: str, path: str) -> Path:
    go = shutil.which("go")
    if go is None:
        pytest.skip("go is needed to fetch the upstream CRDs (hack/test.sh installs it)")
    done = subprocess.run([go, "mod", "download", "-json", module], capture_output=True, text=True, timeout=600,
                          check=False, env={**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"})
    assert done.returncode == 0, done.stderr or done.stdout
    return Path(json.loads(done.stdout)["Dir"]) / path


def install_workload_crds(kube: LocalKube) -> None:
    """Apply both CRDs (idempotent) and wait until they are served."""
    for module, path in MODULES.items():
        done = kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(module_file(module, path)))
        assert done.returncode == 0, done.stderr
    for crd in ("jobsets.jobset.x-k8s.io", "pytorchjobs.kubeflow.org"):
        done = kube.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
        assert done.returncode == 0, done.stderr
