"""pytest plugin: SchedMD's slurm-operator on the simulated cluster (``hack/local-kube.sh up --cluster --slinky``).

On the simulated cluster of ``tests.support.kube_cluster`` (same state directory and ports) it
adds slurm-operator v1.0.1 with a Controller (external), a RestApi and a NodeSet of three pods
``slinky-0..2`` on kwok nodes, and a real Slurm 26.05 from ``hack/slurm-root.sh build 26.05``:
slurmctld, slurmrestd on 127.0.0.1:6820 and one host ``slurmd -N slinky-<i>`` per pod. The
session fixture ``slinky_cluster`` reuses one that ``status --cluster --slinky`` reports ready,
or starts it (building slurm-operator once, cached) and stops it when the last session out leaves.

Needs the 26.05 root (``TG_SLINKY_SLURM_ROOT``, default ``hack/slurm-root.sh path 26.05``); the
tests skip, naming the build command, when it is absent. Port 6820 is slurm-operator's constant:
one such cluster per machine at a time. Mark the tests ``slinky`` (``TG_SKIP_SLINKY=1`` skips
them), ``kube`` and ``kube_cluster``.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from . import services
from .kube import BUILD_TIMEOUT_S, REPO_ROOT, SCRIPT, LocalKube
from .kube_cluster import sim_dir, sim_env

T = TypeVar("T")

NAMESPACE = "slinky"
NODESET = "slinky"
SLURM_NODES = ("slinky-0", "slinky-1", "slinky-2")
"""NodeSet pods and Slurm nodes (pod name = hostname = Slurm node name)."""
OPERATOR_VERSION = "v1.0.1"


def slinky_dir() -> Path:
    return Path(os.environ.get("TG_SLINKY_DIR", REPO_ROOT / ".local" / "slinky"))


def slurm_root() -> Path:
    given = os.environ.get("TG_SLINKY_SLURM_ROOT")
    if given:
        return Path(given)
    out = subprocess.run([str(REPO_ROOT / "hack" / "slurm-root.sh"), "path", "26.05"], capture_output=True,
                         text=True, check=True)
    return Path(out.stdout.strip())


@dataclasses.dataclass
class SlinkyCluster:
    """A running Slinky cluster: the simulated cluster's API and the Slurm that slurm-operator manages."""

    kube: LocalKube
    env: dict[str, str]
    """The environment of ``.local/slinky/env`` on top of ours (Slurm commands first on PATH)."""

    def run(self, *argv: str, timeout: float = 30) -> str:
        done = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout,
                              check=False)
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr or done.stdout}")
        return done.stdout

    def kubectl(self, *args: str, input: str | None = None) -> str:
        done = subprocess.run([str(self.kube.state_dir / "bin" / "kubectl"), *args], env=self.env, input=input,
                              capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done.stdout

    def slurm_node(self, name: str) -> dict[str, str]:
        """``scontrol show node NAME`` as key -> value (Reason and Comment run to the end of their field)."""
        return one_line_fields(self.run("scontrol", "show", "node", "-o", name))

    def slurm_job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job JOB`` as key -> value (JobState, Restarts, NodeList, ExcNodeList, ...)."""
        return one_line_fields(self.run("scontrol", "show", "job", "-o", job_id))

    def kube_node_of(self, pod: str) -> str:
        return self.kubectl("get", "pod", pod, "-n", NAMESPACE, "-o", "jsonpath={.spec.nodeName}").strip()

    @staticmethod
    def wait(what: str, probe: Callable[[], T | None], timeout: float = 120.0) -> T:
        """Poll ``probe`` until it returns a value other than None/False, or fail naming what was awaited."""
        deadline = time.monotonic() + timeout
        while True:
            got = probe()
            if got is not None and got is not False:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(0.5)


def one_line_fields(line: str) -> dict[str, str]:
    """One record of ``scontrol show ... -o`` as key -> value; a value with spaces (Reason, Comment)
    runs on to the next ``Key=``."""
    fields: dict[str, str] = {}
    last = ""
    for part in line.strip().split(" "):
        key, sep, value = part.partition("=")
        if sep and key[:1].isupper():
            fields[key] = value
            last = key
        elif fields:
            fields[last] += " " + part
    return fields


@pytest.fixture(scope="session")
def slinky_cluster() -> Iterator[SlinkyCluster]:
    for variable in ("TG_SKIP_KUBE", "TG_SKIP_SIM_CLUSTER", "TG_SKIP_SLINKY"):
        if os.environ.get(variable) == "1":
            pytest.skip(f"{variable}=1")
    root = slurm_root()
    if not (root / ".trainguard-root").is_file():
        pytest.skip(f"no Slurm 26.05 root at {root} (build it: hack/slurm-root.sh build 26.05)")
    directory = sim_dir()
    env = {**sim_env(), "TG_SLINKY_DIR": str(slinky_dir()), "TG_SLINKY_SLURM_ROOT": str(root)}
    env = {k: v for k, v in env.items() if not k.startswith(("SLURM_", "SLURMRESTD_"))}
    try:
        services.run_script([str(SCRIPT), "build", "--cluster", "--slinky"], env, timeout=BUILD_TIMEOUT_S)
        with services.shared_service(SCRIPT, directory, env, up_args=("--cluster", "--slinky"),
                                     status_args=("--cluster", "--slinky")):
            values = services.read_env_file(slinky_dir() / "env")
            path = f"{values['TG_SLURM_BIN']}:{env.get('PATH', '')}"
            yield SlinkyCluster(kube=LocalKube.load(directory), env={**env, **values, "PATH": path})
    except services.ServiceError as exc:
        pytest.fail(f"Slinky cluster: {exc}", pytrace=False)
