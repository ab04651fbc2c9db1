"""How the operator shell opens the Kubernetes adapter and reports on Kubernetes workloads.

Kept out of the operator shell (``k8s/operator/``) so the shell only branches on the ``kubernetes`` scheduler spec:
opening the adapter (credentials from ``k8s/client.py``), the periodic exclusion sweep, and the
``involvedObject`` of Events about a workload (the JobSet/PyTorchJob itself).
"""

from __future__ import annotations

import logging
from typing import Final

from trainguard.k8s import client, events
from trainguard.k8s.kubejobs import common, nodes, scheduler
from trainguard.schedulers import base, composite

logger = logging.getLogger(__name__)

SPEC: Final = "kubernetes"
"""The ``--scheduler`` value that selects this adapter."""


def kube_of(adapter: base.Scheduler | None) -> scheduler.KubeScheduler | None:
    """The Kubernetes adapter behind the operator's scheduler (alone, or one of several); None if none."""
    if isinstance(adapter, scheduler.KubeScheduler):
        return adapter
    if isinstance(adapter, composite.CompositeScheduler):
        return next((c for c in adapter.children if isinstance(c, scheduler.KubeScheduler)), None)
    return None


async def open_scheduler(kubeconfig: str | None = None, namespaces: tuple[str, ...] = (),
                         node_pool_label: str = nodes.DEFAULT_POOL_LABEL,
                         check_namespace: str = "default") -> scheduler.KubeScheduler:
    """The adapter with its watches started (``namespaces``: only those; empty: every namespace;
    ``node_pool_label``: the node label whose value is a node's pool; ``check_namespace``: where the
    validation checks run, the operator's own namespace)."""
    api = await client.load_api_client(kubeconfig)
    adapter = scheduler.KubeScheduler(api, namespaces=namespaces, node_pool_label=node_pool_label,
                                      check_namespace=check_namespace)
    adapter.start()
    return adapter


def owner_of(adapter: scheduler.KubeScheduler, workload: str) -> dict[str, str] | None:
    """The owner reference fields of ``workload`` (None until the watch has seen its uid)."""
    ref = workload_ref(adapter, workload)
    if ref is None or not ref.uid:
        return None
    return {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name, "uid": ref.uid}


def workload_ref(adapter: scheduler.KubeScheduler, workload: str) -> events.ObjectRef | None:
    """The JobSet/PyTorchJob an Event about ``workload`` is posted on (None: not a Kubernetes one)."""
    try:
        namespace, kind_name, name = common.split_id(workload)
    except ValueError:
        return None
    kind = adapter.kind(kind_name)
    if kind is None:
        return None
    return events.ObjectRef(kind.api_version, kind.kind, name, namespace, adapter.uid_of(workload))
