"""pytest plugin: the helm binary (and the helm-unittest plugin) for the chart tests.

`hack/local-helm.sh` builds helm v3.22.0 from the Go module registry once (cached outside the
repository, a few minutes cold) and links it at .local/bin/helm. Tests marked ``helm`` are skipped
only when ``TG_SKIP_HELM=1``.

Registered in tests/conftest.py:  pytest_plugins = [..., "tests.support.helm"]
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from . import services

SCRIPT = services.HACK_DIR / "local-helm.sh"
CHART = services.REPO_ROOT / "charts" / "trainguard"
BUILD_TIMEOUT_S = 3600
HELM_TIMEOUT_S = 300


@dataclasses.dataclass(frozen=True)
class Helm:
    """The built helm, run with a data directory of its own (where the unittest plugin lives)."""

    binary: Path
    data_home: Path | None

    def run(self, *args: str, kubeconfig: Path | None = None, input: str | None = None,
            timeout: float = HELM_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """helm ARGS (argv, no shell). Never raises on a non-zero exit: callers assert on it."""
        env = {**os.environ}
        if self.data_home is not None:
            env["HELM_DATA_HOME"] = str(self.data_home)
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        return subprocess.run([str(self.binary), *args], env=env, input=input, capture_output=True, text=True,
                              timeout=timeout, check=False)

    def template(self, *args: str, release: str = "tg", namespace: str = "trainguard-system") -> list[dict[str, Any]]:
        """The objects `helm template` renders for the chart with ARGS (e.g. -f FILE, --set K=V)."""
        done = self.run("template", release, str(CHART), "--namespace", namespace, *args)
        assert done.returncode == 0, done.stderr
        return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def _script(*args: str) -> str:
    return services.run_script([str(SCRIPT), *args], os.environ, timeout=BUILD_TIMEOUT_S)


@pytest.fixture(scope="session")
def helm() -> Helm:
    """helm from hack/local-helm.sh (built if needed), with the helm-unittest plugin."""
    if os.environ.get("TG_SKIP_HELM") == "1":
        pytest.skip("TG_SKIP_HELM=1")
    try:
        _script("unittest")
        env_line = _script("env").strip().splitlines()[-1]
    except services.ServiceError as exc:
        pytest.fail(f"building helm: {exc}", pytrace=False)
    data_home = Path(env_line.split("=", 1)[1]) if env_line.startswith("export HELM_DATA_HOME=") else None
    return Helm(binary=services.REPO_ROOT / ".local" / "bin" / "helm", data_home=data_home)
