"""The one place the operator shell gets a ``kubernetes_asyncio`` ApiClient.

Credentials follow kopf's order: the pod's ServiceAccount when running in a cluster, else the
kubeconfig named by the argument or ``$KUBECONFIG`` (else ``~/.kube/config``). Every module that
talks to the API through ``kubernetes_asyncio`` takes its client from here, so there is one rule
for credentials rather than one per caller.
"""

from __future__ import annotations

import os

import kubernetes_asyncio.client
import kubernetes_asyncio.config
from kubernetes_asyncio.config.config_exception import ConfigException


async def load_api_client(kubeconfig: str | None = None) -> kubernetes_asyncio.client.ApiClient:
    """An ApiClient with in-cluster credentials, else those of ``kubeconfig`` / ``$KUBECONFIG``."""
    configuration = kubernetes_asyncio.client.Configuration()
    if kubeconfig is None and not os.environ.get("KUBECONFIG"):
        try:
            kubernetes_asyncio.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return kubernetes_asyncio.client.ApiClient(configuration)
        except ConfigException:
            pass  # not in a pod: fall back to the default kubeconfig
    await kubernetes_asyncio.config.load_kube_config(
        config_file=kubeconfig or os.environ.get("KUBECONFIG") or None, client_configuration=configuration,
    )
    return kubernetes_asyncio.client.ApiClient(configuration)
