"""The Kubernetes signal sources of one operator, opened together: pod logs and Node conditions.

Place: the kopf shell (``k8s/``). ``trainguard operator --scheduler kubernetes`` opens them once
(``open_signals``) and hands them to the engine through its seams: ``log_books`` (a
``signals.sources.BookFactory``: each workload's ``k8s://NAMESPACE/KIND/NAME`` output read from its
pods' logs, ``k8s/podlogs.py``) and ``node_sources`` (``k8s/node_conditions.py``). One ApiClient
(``k8s/client.load_api_client``) serves both; ``close`` closes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import kubernetes_asyncio.client

from trainguard.k8s import client, node_conditions, podlogs
from trainguard.signals import sources


@dataclass
class KubeSignals:
    api: kubernetes_asyncio.client.ApiClient
    log_books: sources.BookFactory
    node_sources: list[sources.NodeSource] = field(default_factory=list)

    async def close(self) -> None:
        await self.api.close()


async def open_signals(kubeconfig: str | None = None, config: podlogs.Config | None = None) -> KubeSignals:
    """Both sources on one ApiClient (``kubeconfig``, else the usual places, else in-cluster)."""
    api = await client.load_api_client(kubeconfig)
    log_books, _source = podlogs.books(api, config)
    return KubeSignals(api=api, log_books=log_books, node_sources=[node_conditions.NodeConditions(api)])
