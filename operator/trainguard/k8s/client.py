"""The one place an ``kubernetes_asyncio`` ApiClient is made (the Kubernetes sources and adapters share it).

Place: the kopf shell (``k8s/``). The credentials are the ones ``kubectl`` would use: the given
kubeconfig file, else ``$KUBECONFIG`` / ``~/.kube/config``, else the pod's ServiceAccount (in-cluster).
"""

from __future__ import annotations

import os

import kubernetes_asyncio.client
import kubernetes_asyncio.config


def _kubeconfig_path(kubeconfig: str | None) -> str | None:
    """The kubeconfig file to use: the given one, ``$KUBECONFIG``'s first, ``~/.kube/config``; None: in-cluster."""
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
    default = os.path.expanduser("~/.kube/config")
    if path is None and os.path.exists(default):
        path = default
    return path


async def load_api_client(kubeconfig: str | None = None) -> kubernetes_asyncio.client.ApiClient:
    """An ApiClient for ``kubeconfig`` (or the usual places, or in-cluster); the caller closes it."""
    configuration = kubernetes_asyncio.client.Configuration()
    path = _kubeconfig_path(kubeconfig)
    if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        kubernetes_asyncio.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        await kubernetes_asyncio.config.load_kube_config(config_file=path, client_configuration=configuration)
    return kubernetes_asyncio.client.ApiClient(configuration)
