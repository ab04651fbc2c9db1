"""The runtime pause as a Kubernetes field: the ``trainguard-control`` ConfigMap in the operator's namespace.

Place: the kopf shell's side of ``act.switch``. The pause itself lives in the audit store (every
replica and the standalone runner read it there before every step); this module lets ``kubectl`` (and
Argo CD) set it without the CLI or the HTTP API::

    kubectl -n trainguard-system create configmap trainguard-control \\
        --from-literal=actionsPaused=true --from-literal=pauseReason="rack 12 maintenance"
    kubectl -n trainguard-system patch configmap trainguard-control --type merge \\
        -p '{"data":{"actionsPaused":"false"}}'

Each reconcile round reads the ConfigMap (one GET; ``status_interval_s``, 2 s by default) and mirrors
a *change* of it into the store, audited with ``by`` = ``kubernetes:configmap/<namespace>/trainguard-control``.
Edge-triggered on purpose: a pause set through the CLI, the API or the console is not undone because the
ConfigMap still says ``false``. On first sight (a start, a new term) only a pause is applied, never a
clear: a restart of the operator must not lift a pause somebody set elsewhere.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import kubernetes_asyncio.client as k8s

from trainguard.act import switch
from trainguard.k8s import client
from trainguard.store import audit

logger = logging.getLogger(__name__)

CONFIGMAP: Final = "trainguard-control"
PAUSED_KEY: Final = "actionsPaused"
REASON_KEY: Final = "pauseReason"
_TRUE: Final = frozenset({"true", "yes", "1", "on"})


class PauseMirror:
    """Mirrors the ConfigMap's pause into the store when the ConfigMap changes."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._seen: str | None = None
        """resourceVersion of the ConfigMap as last mirrored; None before the first read."""

    @property
    def by(self) -> str:
        return f"kubernetes:configmap/{self.namespace}/{CONFIGMAP}"

    async def sync(self, api: client.ApiClient, store: audit.AuditStore, now: float) -> None:
        """One read of the ConfigMap; a change since the last read is written to the store."""
        try:
            found = client.to_dict(api, await k8s.CoreV1Api(api).read_namespaced_config_map(CONFIGMAP, self.namespace))
        except client.ApiException as exc:
            if client.is_not_found(exc):
                return  # no ConfigMap: the pause is set elsewhere (CLI, API, console) or not at all
            raise
        version = str((found.get("metadata") or {}).get("resourceVersion") or "")
        if version == self._seen:
            return
        first = self._seen is None
        data: dict[str, Any] = found.get("data") or {}
        paused = str(data.get(PAUSED_KEY, "")).strip().lower() in _TRUE
        reason = str(data.get(REASON_KEY) or "set in the trainguard-control ConfigMap")[:1000]
        stored = switch.pause_reason(await store.control(switch.PAUSE)) is not None
        self._seen = version
        if paused == stored or (first and not paused):
            return
        await store.set_control(switch.PAUSE, {"paused": paused, "reason": reason if paused else ""}, by=self.by,
                                channel="kubernetes", at=now,
                                payload={"operation": "pause" if paused else "resume-actions", "status": "done",
                                         "reason": reason if paused else ""})
        logger.warning("actions %s by the %s ConfigMap%s", "paused" if paused else "resumed", CONFIGMAP,
                       f": {reason}" if paused else "")
