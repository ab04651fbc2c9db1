"""The list+watch loops that feed ``KubeScheduler``'s cache (workloads, their pods, nodes).

Kept apart from the adapter's operations: one loop per watched list (``k8s/listwatch.py``), each
writing into a dict the adapter reads, relisting from scratch after an expired resourceVersion (410),
an error, or the end of each watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import aiohttp
from kubernetes_asyncio import client as kclient
from kubernetes_asyncio import watch as kwatch
from kubernetes_asyncio.client.exceptions import ApiException

from trainguard.k8s import client, listwatch
from trainguard.k8s.kubejobs import common, jobset, pytorchjob

logger = logging.getLogger(__name__)

WATCH_TIMEOUT_S: Final = 240
"""Server-side timeout of one watch request; the loop lists again and watches from the listing."""
NOT_SERVED_S: Final = 30.0
"""Wait before asking again for a kind the API server does not serve (its CRD not installed)."""

KINDS: Final[tuple[common.Kind, ...]] = (jobset.KIND, pytorchjob.KIND)
"""The workload kinds the adapter serves (the RBAC scan in tests/unit/k8s/test_rbac.py reads it too)."""

ReadJson = Callable[[Awaitable[Any]], Awaitable[common.Obj]]
"""Awaits an API call made with ``_preload_content=False`` and returns its JSON body."""


@dataclasses.dataclass(frozen=True)
class Watch:
    """One list+watch loop: what it watches, how, and where the objects go."""

    what: str
    call: Callable[..., Awaitable[Any]]
    store: dict[tuple[str, str], common.Obj]
    key: Callable[[common.Obj], tuple[str, str]]
    synced: asyncio.Event
    on_event: Callable[[common.Obj], None] | None
    scoped: str | None = None
    """The namespace this watch covers (its relist replaces only that namespace's entries); None: all."""


async def watch_forever(spec: Watch, read_json: ReadJson, changed: asyncio.Event) -> None:
    """List, then watch from the listing's resourceVersion, into ``spec.store``; again on any end
    (``listwatch.list_watch_forever``). ``changed`` is set on every listing and event (the engine's
    discovery may look now)."""
    target, key, on_event = spec.store, spec.key, spec.on_event

    async def relist() -> str:
        listing = await read_json(spec.call(_preload_content=False))
        items = list(listing.get("items") or [])
        for stale in [k for k in target if spec.scoped is None or k[0] == spec.scoped]:
            del target[stale]
        for item in items:
            target[key(item)] = item
            if on_event is not None:
                on_event(item)
        spec.synced.set()
        changed.set()
        return str((listing.get("metadata") or {}).get("resourceVersion") or "")

    async def watch(version: str) -> str:
        async with kwatch.Watch(return_type="object") as stream:  # we keep raw dicts
            events = stream.stream(spec.call, resource_version=version, timeout_seconds=WATCH_TIMEOUT_S,
                                   allow_watch_bookmarks=True)
            async for event in events:
                kind, obj = str(event.get("type")), event.get("raw_object") or {}
                if kind == "BOOKMARK" or not isinstance(obj, dict):
                    continue
                if kind == "DELETED":
                    target.pop(key(obj), None)
                else:
                    target[key(obj)] = obj
                    if on_event is not None:
                        on_event(obj)
                changed.set()
        return ""  # listed again after each watch: an object whose deletion we missed is dropped

    def failed(exc: Exception, delay: float) -> float | None:
        if client.is_not_found(exc):  # the kind's CRD is not installed: nothing of it to watch
            spec.synced.set()
            logger.info("watch %s: not served by this API server (404); retrying in %.0f s", spec.what, NOT_SERVED_S)
            return NOT_SERVED_S
        detail = f"{exc.status} {exc.reason}" if isinstance(exc, ApiException) else str(exc)
        logger.warning("watch %s: %s; retrying in %.1f s", spec.what, detail, delay)
        return None

    await listwatch.list_watch_forever(relist, watch, failed, backoff=listwatch.Backoff(0.5, 30.0),
                                       errors=(ApiException, aiohttp.ClientError, TimeoutError, OSError, ValueError))


def by_name(obj: common.Obj) -> tuple[str, str]:
    return str(common.meta(obj).get("namespace") or ""), str(common.meta(obj).get("name"))


def by_uid(obj: common.Obj) -> tuple[str, str]:
    return str(common.meta(obj).get("namespace") or ""), str(common.meta(obj).get("uid"))


def functools_partial(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
    """``functools.partial`` that keeps ``__doc__`` (the watch reads the watch argument's name from it)."""
    bound = functools.partial(func, *args, **kwargs)
    functools.update_wrapper(bound, func)
    return bound


class Cache:
    """The watch-fed view of the cluster the adapter's discovery reads: per served kind its workloads
    and their pods, and the nodes; one ``watch_forever`` loop per list, started by ``start``."""

    def __init__(self, kinds: Sequence[common.Kind], namespaces: Sequence[str], api: kclient.ApiClient,
                 read_json: ReadJson, on_pod: Callable[[common.Kind, common.Obj], None]) -> None:
        self._kinds = tuple(kinds)
        self._namespaces = tuple(namespaces)
        self._core = kclient.CoreV1Api(api)
        self._custom = kclient.CustomObjectsApi(api)
        self._read_json = read_json
        self._on_pod = on_pod
        self.objects: dict[str, dict[tuple[str, str], common.Obj]] = {k.kind: {} for k in kinds}
        self.pods: dict[str, dict[tuple[str, str], common.Obj]] = {k.kind: {} for k in kinds}
        self.node_objects: dict[tuple[str, str], common.Obj] = {}
        """The nodes by ("", name), as the watch keeps them."""
        self._synced: dict[str, asyncio.Event] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.changed = asyncio.Event()
        """Set on every watch event: the engine's discovery may look now."""

    def nodes(self) -> dict[str, common.Obj]:
        return {key[1]: node for key, node in self.node_objects.items()}

    def start(self) -> None:
        """Begin the watches (workloads of each kind, their pods, nodes)."""
        if self._tasks:
            return
        partial = functools_partial
        for kind in self._kinds:
            for namespace in self._namespaces or (None,):
                where = namespace or "all"
                objects = partial(self._custom.list_cluster_custom_object, kind.group, kind.version, kind.plural) \
                    if namespace is None else partial(self._custom.list_namespaced_custom_object, kind.group,
                                                      kind.version, namespace, kind.plural)
                pods = partial(self._core.list_pod_for_all_namespaces, label_selector=kind.pod_selector_key) \
                    if namespace is None else partial(self._core.list_namespaced_pod, namespace,
                                                      label_selector=kind.pod_selector_key)
                self._spawn(f"{kind.plural}@{where}", objects, self.objects[kind.kind], by_name, scoped=namespace)
                self._spawn(f"pods-of-{kind.plural}@{where}", pods, self.pods[kind.kind], by_uid,
                            on_event=partial(self._on_pod, kind), scoped=namespace)
        self._spawn("nodes", partial(self._core.list_node), self.node_objects, lambda o: ("", by_name(o)[1]))

    def _spawn(self, what: str, call: Callable[..., Awaitable[Any]], store: dict[tuple[str, str], common.Obj],
               key: Callable[[common.Obj], tuple[str, str]], *,
               on_event: Callable[[common.Obj], None] | None = None, scoped: str | None = None) -> None:
        synced = self._synced.setdefault(what, asyncio.Event())
        spec = Watch(what, call, store, key, synced, on_event, scoped)
        task = asyncio.ensure_future(watch_forever(spec, self._read_json, self.changed))
        task.set_name(f"kube-watch-{what}")
        self._tasks.append(task)

    async def wait_synced(self, within_s: float) -> bool:
        """Whether every watch has had its first listing (waits up to ``within_s``)."""
        if not self._synced:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in self._synced.values())), within_s)
        return all(e.is_set() for e in self._synced.values())

    async def close(self) -> None:
        """Stop the watches."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
