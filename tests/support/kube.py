"""pytest plugin: a real Kubernetes API for the tests that need one (kopf shell, CRDs, RBAC).

`hack/local-kube.sh up` builds (once, cached outside the repository) and starts a real etcd
and kube-apiserver on loopback. The session fixture `kube_api` reuses one that is already
running, or starts one; the lifecycle is the one all local services share
(``tests.support.services``: leases, and the last session out stops what pytest started).
There is no kubelet and no controller: pods are never scheduled, deleted namespaces stay
Terminating, nothing garbage-collects owner references, and no `default` ServiceAccount
appears by itself. Tests marked ``kube`` are skipped only when ``TG_SKIP_KUBE=1``.

Registered in tests/conftest.py:  pytest_plugins = [..., "tests.support.kube"]
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from . import services

REPO_ROOT = services.REPO_ROOT
SCRIPT = services.HACK_DIR / "local-kube.sh"

# A cold build compiles about 2,000 Go packages (5-8 minutes on 2 shared cores, measured);
# a cached one takes 0.1 s. Generous, so a first run on a new machine is not cut short.
BUILD_TIMEOUT_S = 3600
KUBECTL_TIMEOUT_S = 60


def kube_dir() -> Path:
    """The state directory the script uses (TG_KUBE_DIR, as in hack/local-kube.sh)."""
    return Path(os.environ.get("TG_KUBE_DIR", REPO_ROOT / ".local" / "kube"))


@dataclasses.dataclass(frozen=True)
class LocalKube:
    """A running local API: where it is and how to talk to it as admin."""

    state_dir: Path
    kubeconfig: Path
    server: str
    admin_token: str
    ca_data: str  # base64 PEM of the CA that signed the server certificate

    @property
    def kubectl_path(self) -> Path:
        return self.state_dir / "bin" / "kubectl"

    @classmethod
    def load(cls, state_dir: Path) -> LocalKube:
        kubeconfig = state_dir / "kubeconfig"
        doc: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
        cluster = doc["clusters"][0]["cluster"]
        user = doc["users"][0]["user"]
        return cls(
            state_dir=state_dir,
            kubeconfig=kubeconfig,
            server=cluster["server"],
            admin_token=user["token"],
            ca_data=cluster["certificate-authority-data"],
        )

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        input: str | None = None,
        timeout: float = KUBECTL_TIMEOUT_S,
    ) -> subprocess.CompletedProcess[str]:
        """Run the kubectl of the same build (argv, no shell), as admin unless `kubeconfig`
        names another identity. Never raises on a non-zero exit: callers assert on it."""
        env = {**os.environ, "KUBECONFIG": str(kubeconfig or self.kubeconfig)}
        return subprocess.run(
            [str(self.kubectl_path), *args],
            env=env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def create_token(self, service_account: str, namespace: str, duration: str = "1h") -> str:
        """Issue a ServiceAccount token through the TokenRequest API (`kubectl create token`)."""
        done = self.kubectl("create", "token", service_account, "-n", namespace, f"--duration={duration}")
        if done.returncode != 0:
            raise RuntimeError(f"kubectl create token {namespace}/{service_account} failed: {done.stderr.strip()}")
        return done.stdout.strip()

    def write_token_kubeconfig(self, token: str, path: Path, user: str = "token-user") -> Path:
        """Write a kubeconfig for this API that authenticates with `token` (mode 600)."""
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "trainguard-local",
                    "cluster": {"server": self.server, "certificate-authority-data": self.ca_data},
                }
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": user, "context": {"cluster": "trainguard-local", "user": user}}],
            "current-context": user,
        }
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
        tmp.chmod(0o600)
        tmp.replace(path)
        return path

    def service_account_kubeconfig(self, service_account: str, namespace: str, path: Path) -> Path:
        """Token for `namespace/service_account` plus a kubeconfig that uses it."""
        token = self.create_token(service_account, namespace)
        return self.write_token_kubeconfig(token, path, user=f"{namespace}-{service_account}")


def run_script(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run hack/local-kube.sh with the session's environment; the caller checks the result."""
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL
    )


def unique_name(prefix: str) -> str:
    """A DNS-1123 name no other test (or earlier session on a reused API) has used."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def kube_api() -> Iterator[LocalKube]:
    """The local API for the session: reused when already up, else started (and stopped by the last session out)."""
    if os.environ.get("TG_SKIP_KUBE") == "1":
        pytest.skip("TG_SKIP_KUBE=1")
    directory = kube_dir()
    try:
        # The possibly long compile first, outside the shared lock and with its own timeout;
        # a no-op when the cached binaries report the pinned version.
        services.run_script([str(SCRIPT), "build"], os.environ, timeout=BUILD_TIMEOUT_S)
        with services.shared_service(SCRIPT, directory, os.environ):
            yield LocalKube.load(directory)
    except services.ServiceError as exc:
        pytest.fail(f"local Kubernetes API: {exc}", pytrace=False)
