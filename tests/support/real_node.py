"""pytest plugin: the simulated cluster with a real kubelet node (``hack/local-kube.sh up --cluster
--real-node``), where pods really run: containerd + runc + CNI, images imported (no registry).

``real_node`` is a session fixture: the simulated cluster of ``tests.support.kube_cluster`` (same state
directory, same ports) with the node ``real-node-1`` added, reused when it is up and stopped by the
last session out. It needs root (namespaces, cgroups); tests marked ``real_node`` are skipped only
when ``TG_SKIP_REAL_NODE=1``.

Registered in tests/conftest.py:  pytest_plugins = [..., "tests.support.real_node"]
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator

import pytest

from . import kube_cluster, services

NODE = "real-node-1"
BUSYBOX_IMAGE = "localhost/trainguard-busybox:1"
"""A one-layer image of Debian's static busybox (sh, echo, cat, id, sleep, head, tail, ...)."""
OPERATOR_IMAGE = "trainguard:dev"
STORAGE_CLASS = "real-node-local"
REAL_NODE_TAINT = "trainguard.dev/real-node"
"""The node's PreferNoSchedule taint (hack/lib/real-node.sh): the scheduler keeps pods that do not ask for the
node elsewhere; a pod that selects it by name runs there without a toleration."""


@dataclasses.dataclass(frozen=True)
class RealNode:
    """The simulated cluster, with ``NODE`` a real kubelet in it."""

    cluster: kube_cluster.SimCluster
    name: str = NODE


@pytest.fixture(scope="session")
def real_node() -> Iterator[RealNode]:
    """The simulated cluster with the real node joined (built and started if needed)."""
    for variable in ("TG_SKIP_KUBE", "TG_SKIP_SIM_CLUSTER", "TG_SKIP_REAL_NODE"):
        if os.environ.get(variable) == "1":
            pytest.skip(f"{variable}=1")
    if os.geteuid() != 0:
        pytest.fail("the real node needs root (network and mount namespaces, cgroups, containerd)", pytrace=False)
    directory, env = kube_cluster.sim_dir(), kube_cluster.sim_env()
    script = kube_cluster.SCRIPT
    try:
        services.run_script([str(script), "build", "--cluster", "--real-node"], env,
                            timeout=kube_cluster.BUILD_TIMEOUT_S)
        with services.shared_service(script, directory, env, up_args=("--cluster", "--real-node"),
                                     status_args=("--cluster", "--real-node")):
            yield RealNode(kube_cluster.SimCluster(kube=kube_cluster.LocalKube.load(directory),
                                                   port_base=kube_cluster.port_base(),
                                                   pod_log_dir=directory / "cluster" / "pod-logs"))
    except services.ServiceError as exc:
        pytest.fail(f"real node: {exc}", pytrace=False)
