"""The Kubernetes signal sources of one operator, opened together: pod logs and Node conditions.

Place: the kopf shell (``k8s/``). ``trainguard operator --scheduler kubernetes`` (alone or beside a
Slurm scheduler, in one engine) opens them once (``open_signals``) and hands them to the engine
through its seams: ``log_books`` (a ``signals.sources.BookFactory``; ``routed`` sends a Kubernetes
workload, job id ``k8s/NAMESPACE/KIND/NAME``, to its pods' logs (``k8s/podlogs.py``) and every other
job to the installation's own source) and ``node_sources`` (``k8s/node_conditions.py``). One ApiClient
serves both: the operator's own when given, else one from ``k8s/client.load_api_client``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kubernetes_asyncio.client

from trainguard.k8s import client, node_conditions, podlog_parts, podlogs, pods
from trainguard.model import clock as clock_mod
from trainguard.signals import fileio, sources


@dataclass
class KubeSignals:
    api: kubernetes_asyncio.client.ApiClient
    log_books: sources.BookFactory
    node_sources: list[sources.NodeSource] = field(default_factory=list)
    owns_api: bool = True

    async def close(self) -> None:
        if self.owns_api:
            await self.api.close()


async def open_signals(api: kubernetes_asyncio.client.ApiClient | None = None, *, kubeconfig: str | None = None,
                       config: podlog_parts.Config | None = None,
                       ended: Callable[[pods.Target], Sequence[dict[str, Any]]] | None = None,
                       retired: Callable[[pods.Target], Mapping[str, int]] | None = None) -> KubeSignals:
    """Both sources on ``api`` (not closed by us), else on a client of ``kubeconfig``/the usual places/in-cluster
    (``ended``: the failed pods the scheduler saw; ``retired``: the pods our suspends took away; both read by
    the pod-log books, ``podlogs.PodLogSource``)."""
    owns = api is None
    max_connections = (config or podlog_parts.Config()).max_connections
    api_client = api if api is not None else await client.load_api_client(kubeconfig, max_connections=max_connections)
    log_books, _source = podlogs.books(api_client, config, ended=ended, retired=retired)
    return KubeSignals(api=api_client, log_books=log_books,
                       node_sources=[node_conditions.NodeConditions(api_client)], owns_api=owns)


def routed(kube_books: sources.BookFactory, other: sources.BookFactory) -> sources.BookFactory:
    """A factory giving a Kubernetes workload (job id ``k8s/NAMESPACE/KIND/NAME``) a pod-log book and every
    other job a book of ``other`` (files, VictoriaLogs, Loki)."""

    def make(workload: str, job_id: str, clock: clock_mod.Clock, pool: fileio.FilePool | None) -> sources.LogBook:
        factory = kube_books if pods.is_workload_id(job_id) else other
        return factory(workload, job_id, clock, pool)

    return make
