"""WorkloadRecovery status writes: read, compare with the projection, patch ``/status`` only on change.

Place in the loop: the reporting step, under the operator's status coalescer
(``k8s/operator/recoveries.py``). ``sync_status`` reads the object (or takes one just listed),
projects the engine's view onto its stored status (``status.project``) and patches ``/status`` only
when they differ, with the resourceVersion it read: a concurrent writer makes the server answer 409
Conflict, and the write is recomputed from a fresh read, so a concurrent writer's change is never
overwritten blindly.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kubernetes_asyncio import client as k8s

from trainguard.k8s import client, recovery
from trainguard.k8s.status import WorkloadView, as_stored, parse_status, project, status_body

logger = logging.getLogger("trainguard.k8s.status")

CONFLICT_RETRIES: Final = 5
"""Re-reads after a 409 before giving up until the next round; conflicts come from a concurrent
writer (a person, kubectl, another controller) and settle in one or two rounds."""


@dataclass
class SyncStats:
    """Counters of one status writer (for logs, metrics and tests)."""

    patches: int = 0
    unchanged: int = 0
    conflicts: int = 0


async def get_object(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """One WorkloadRecovery as the API's JSON object; ApiException 404 when there is none."""
    obj = await k8s.CustomObjectsApi(api).get_namespaced_custom_object(
        recovery.GROUP, recovery.VERSION, namespace, recovery.PLURAL, name)
    return dict(obj)


async def sync_status(
    api: client.ApiClient,
    namespace: str,
    name: str,
    view: WorkloadView,
    *,
    now: datetime.datetime,
    observed: Mapping[str, Any] | None = None,
    stats: SyncStats | None = None,
) -> bool:
    """Patch the status of ``namespace/name`` to the projection of ``view`` if it differs.

    ``observed`` is an object already read (e.g. by a list); its resourceVersion guards the write.
    Returns True when a patch was written. ApiException 404 propagates (the object is gone).
    """
    stats = stats if stats is not None else SyncStats()
    objects = k8s.CustomObjectsApi(api)
    current = dict(observed) if observed is not None else await get_object(api, namespace, name)
    for _ in range(CONFLICT_RETRIES + 1):
        metadata = current.get("metadata") or {}
        previous = parse_status(current.get("status"))
        generation = metadata.get("generation")
        desired = as_stored(project(view, previous, generation=generation if isinstance(generation, int) else None,
                                    now=now))
        if previous == desired:
            stats.unchanged += 1
            return False
        body = {"metadata": {"resourceVersion": metadata.get("resourceVersion")}, "status": status_body(desired)}
        try:
            await client.merge_patch(objects.patch_namespaced_custom_object_status,
                                     recovery.GROUP, recovery.VERSION, namespace, recovery.PLURAL, name, body=body)
        except client.ApiException as exc:
            if not client.is_conflict(exc):
                raise
            stats.conflicts += 1
            logger.info("%s/%s: status conflict (%s); re-reading", namespace, name, client.message_of(exc))
            current = await get_object(api, namespace, name)
            continue
        stats.patches += 1
        return True
    logger.warning("%s/%s: status still conflicting after %d re-reads; next round", namespace, name, CONFLICT_RETRIES)
    return False
