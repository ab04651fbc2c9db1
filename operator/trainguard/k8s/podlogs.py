"""A Kubernetes workload's output read from its pods' logs (``signals.sources.LogBook``).

Place: the kopf shell (``k8s/``), because it speaks the Kubernetes API; the engine sees only the
log-source seam. The Kubernetes adapter names a workload's output ``k8s://NAMESPACE/KIND/NAME``
(``k8s.pods.Target``); a ``PodLogBook`` follows EVERY pod of that workload:

- **pods**: listed, then watched, by the label the workload's controller puts on them
  (``jobset.sigs.k8s.io/jobset-name`` / ``training.kubeflow.org/job-name``); pods appearing later,
  and pods replaced by a restart of the workload, are followed as they come;
- **lines**: one follow stream per started container (``GET .../pods/P/log?follow=true&timestamps=true``),
  each line tagged with the pod's node (``spec.nodeName``) and rank (``k8s.pods.rank_of``). A stream
  that ends while its container still runs (apiserver or kubelet restart, network) is opened again
  with ``sinceTime`` = the second of the newest line read from it; lines at or before that point
  already read are skipped, so a reconnect hands out each line once;
- **endings**: a container that terminated with a non-zero exit code or a reason (``OOMKilled``,
  ``Error``, ``ContainerStatusUnknown``...) and a pod that failed for a reason (``Evicted``,
  ``DeadlineExceeded``) become one line of ours each (``k8s.pods.termination_lines``), which the
  catalog's ``k8s.*`` entries recognise.

Position (a ``TailPosition`` in the tail-position table, kept by ``signals.storebook``): ``offset``
is the CRI timestamp (ns) of the newest line handed to detection, ``inode`` how many lines with
exactly that timestamp were handed out, ``fingerprint`` the hashes (pod, container, text) of up to
four of them, ``lineno`` the line count. A restarted engine follows every pod again from the second
of ``offset`` and skips lines before it and the hashed lines at it. A line belongs to the attempt
running at its timestamp: from the attempt's start (``attempt_start``/``place_at_start``) on; once a
new attempt is seen, what its ended pods still deliver from before is the old one's (``attempt_replaced``).

What a restart of ours cannot replay: a line of one pod that reached us later than a newer line of
another pod was handed out AND after the position was saved (the streams are independent, so their
lines arrive interleaved only roughly in time order; each read hands its lines out in timestamp
order). Lines are read live without that limit; only that window of a restart can skip such a line.

Hostile output: a line longer than ``max_line`` bytes keeps its first ``max_line`` bytes and a marker
saying how many were dropped (never held whole in memory); bytes that are not UTF-8 are replaced;
at most ``max_buffer`` lines wait between two reads (the oldest are dropped, with a marker). An
unreachable apiserver is one log line per change of state and retries with backoff.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Final

import kubernetes_asyncio.client
from kubernetes_asyncio.client.exceptions import ApiException

from trainguard.k8s import listwatch, pods
from trainguard.k8s.client import message_of
from trainguard.k8s.kubejobs import jobset as jobset_kind
from trainguard.k8s.kubejobs import pytorchjob as pytorchjob_kind
from trainguard.k8s.podlog_parts import Config, Follow, Item, line_hash
from trainguard.model import clock as clock_mod
from trainguard.model import signals
from trainguard.signals import fileio, sources
from trainguard.signals.storebook import Out, StoreBook, Stream
from trainguard.signals.tailer import MARKER

logger = logging.getLogger(__name__)

KINDS: Final = (jobset_kind.KIND, pytorchjob_kind.KIND)
"""The workload kinds whose spec ``layout`` reads (the RBAC scan in tests/unit/k8s/test_rbac.py reads it too)."""

KIND = "kubernetes"
"""``LogBook.kind`` of this source (not ``files``: it places attempt starts itself)."""

class PodLogSource:
    """What every book of one engine shares: the API client and the settings."""

    def __init__(self, api: kubernetes_asyncio.client.ApiClient, config: Config | None = None) -> None:
        self.api = api
        self.config = config or Config()
        self.core = kubernetes_asyncio.client.CoreV1Api(api)
        self.custom = kubernetes_asyncio.client.CustomObjectsApi(api)
        self.reachable: bool | None = None
        self.ended: Callable[[pods.Target], Sequence[dict[str, Any]]] | None = None
        """Failed pod versions the scheduler's watch saw (``KubeScheduler.ended_pods``): a book makes
        their ending lines before each read, so a failure reaches the attempt it ended even when this
        book's own watch sees it after the workload's re-creation of the pod moved the attempt."""
        self.retired: Callable[[pods.Target], Mapping[str, int]] | None = None
        """Pods our suspends took away, uid -> when (ns; ``KubeScheduler.retired_pods``): what such a pod
        prints, or how it ends, after that is our restart's doing (a real kubelet kills it seconds after
        our resume), never a failure of the attempt our resume started."""

    def ok(self) -> None:
        if self.reachable is False:
            logger.warning("pod logs: the Kubernetes API is reachable again")
        self.reachable = True

    def failed(self, what: str, exc: BaseException) -> None:
        if self.reachable is not False:
            why = message_of(exc) if isinstance(exc, ApiException) else f"{type(exc).__name__}: {exc}"
            logger.error("pod logs: %s failed: %s (retrying with backoff; one line again when it works)",
                         what, " ".join(str(why).split())[:300])
        self.reachable = False

    async def layout(self, target: pods.Target) -> pods.Layout | None:
        """The workload's rank layout from its spec; None when it cannot be read (ranks from labels only)."""
        kind = jobset_kind.KIND if target.kind == pods.JOBSET else pytorchjob_kind.KIND
        try:
            body = await self.custom.get_namespaced_custom_object(kind.group, kind.version, target.namespace,
                                                                  kind.plural, target.name)
        except (TimeoutError, ApiException, OSError) as exc:
            logger.info("pod logs: %s unreadable (%s): ranks from pod labels only", target.path, exc)
            return None
        return pods.layout_of(target.kind, body)

    @contextlib.asynccontextmanager
    async def open_log(self, namespace: str, pod: str, container: str,
                       since_ns: int | None) -> AsyncIterator[Any]:
        """One follow stream of a container's log, with timestamps, from ``since_ns`` (whole seconds) on."""
        query: list[tuple[str, Any]] = [("container", container), ("follow", "true"), ("timestamps", "true")]
        if since_ns:
            query.append(("sinceTime", pods.format_time(since_ns)))
        # sinceTime is not among the generated client's parameters of read_namespaced_pod_log: the same
        # request through the client's own call_api (same credentials and TLS).
        response = await self.stream("/api/v1/namespaces/{namespace}/pods/{name}/log",
                                     {"namespace": namespace, "name": pod}, query, "*/*", None)
        try:
            yield response
        finally:
            response.release()

    async def stream(self, path: str, path_params: dict[str, str], query: list[tuple[str, Any]], accept: str,
                     request_timeout: float | None) -> Any:
        """An open streaming GET (the body not read yet); an error status raises ``ApiException``
        (``client.ApiClient.request``)."""
        resp = await self.api.call_api(path, "GET", path_params=path_params, query_params=query,
                                       header_params={"Accept": accept}, auth_settings=["BearerToken"],
                                       _preload_content=False, _request_timeout=request_timeout)
        return resp[0] if isinstance(resp, tuple) else resp


class PodLogBook(StoreBook):
    """The followed output of one Kubernetes workload: every pod's log (see the module docstring)."""

    kind = KIND

    def __init__(self, workload: str, job_id: str, clock: clock_mod.Clock, source: PodLogSource) -> None:
        super().__init__(workload, job_id, clock)
        self.source = source
        self._config = source.config
        self.target: pods.Target | None = None
        self.layout: pods.Layout | None = None
        self._buffer: collections.deque[Item] = collections.deque()
        self._follows: dict[tuple[str, str], Follow] = {}
        """(pod name, container) -> its follow."""
        self._views: dict[str, pods.PodView] = {}
        self._endings: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._closing: list[asyncio.Task[None]] = []
        self.overflowed = 0
        self._uids: set[str] = set()  # every pod seen (``_note``)
        self._replaced: dict[str, int] = {}  # pod uid -> when a new attempt was seen (``attempt_replaced``)
        self.watched = asyncio.Event()
        """Set once the pods were listed (tests wait on it instead of on time)."""

    # -- following -----------------------------------------------------------------------------

    def _following(self) -> None:
        if self._task is not None:
            return
        for s in self.files:
            self.target = pods.parse_path(s.path)
            if self.target is not None:
                break
        if self.target is None:
            logger.warning("%s: no k8s://NAMESPACE/KIND/NAME among %s: no pod logs to read", self.workload,
                           [s.path for s in self.files])
            return
        self._task = asyncio.ensure_future(self._watch_forever())
        self._task.set_name(f"podlogs:{self.workload}")

    def close(self) -> None:
        tasks = [t for t in [self._task, *(f.task for f in self._follows.values())] if t is not None]
        for t in tasks:
            t.cancel()
        self._task = None
        self._follows.clear()
        self._closing = tasks

    async def wait_closed(self) -> None:
        """After ``close``: until every task of the book has ended."""
        await asyncio.gather(*self._closing, return_exceptions=True)
        self._closing = []

    def _since(self) -> int:
        """Lines before this time (ns) are not wanted by any stream (the earliest floor)."""
        return min((s.floor for s in self.files), default=0)

    async def _watch_forever(self) -> None:
        """The workload's pods, listed then watched (``listwatch.list_watch_forever``), each one followed."""
        assert self.target is not None
        target = self.target
        self.layout = await self.source.layout(target)

        async def relist() -> str:
            listed = await self.source.core.list_namespaced_pod(target.namespace, label_selector=target.selector)
            self.source.ok()
            seen = set()
            for pod in listed.items:
                body = self.source.api.sanitize_for_serialization(pod)
                seen.add(str((body.get("metadata") or {}).get("uid", "")))
                self._pod(body)
            for uid in [u for u in self._views if u not in seen]:
                self._gone(uid)
            self.watched.set()
            return str(listed.metadata.resource_version or "")

        def failed(exc: Exception, delay: float) -> None:
            del delay  # one line per change of state, not per retry (PodLogSource.failed)
            self.source.failed(f"watching the pods of {target.path}", exc)

        await listwatch.list_watch_forever(relist, functools.partial(self._watch, target), failed,
                                           backoff=listwatch.Backoff(self._config.retry_s, self._config.max_backoff_s))

    async def _watch(self, target: pods.Target, version: str) -> str:
        """Pod events from ``version`` until the watch ends; the newest resourceVersion seen."""
        query = [("labelSelector", target.selector), ("watch", "true"), ("allowWatchBookmarks", "true"),
                 ("resourceVersion", version), ("timeoutSeconds", str(self._config.watch_timeout_s))]
        response = await self.source.stream("/api/v1/namespaces/{namespace}/pods", {"namespace": target.namespace},
                                            query, "application/json", self._config.watch_timeout_s + 30)
        try:
            async for raw in listwatch.response_lines(response):
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue
                obj = event.get("object") or {}
                kind = event.get("type")
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        return ""
                    raise ApiException(status=obj.get("code") or 500, reason=str(obj.get("message", "")))
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    self._pod(obj)
                    self._gone(str((obj.get("metadata") or {}).get("uid", "")))
                else:
                    self._pod(obj)
            return version
        finally:
            response.release()

    def _pod(self, body: dict[str, Any]) -> None:
        """A pod as listed or watched: its view and endings, its containers' follows."""
        self._start_follows(self._note(body))

    def _note(self, body: dict[str, Any]) -> pods.PodView:
        """A pod's view (node, rank, containers) and a line for each of its endings not seen before."""
        assert self.target is not None
        view = pods.view_of(self.target.kind, body, self.layout)
        self._views[view.uid] = view
        self._uids.add(view.uid)
        self._note_endings(body, view)
        return view

    def _recall_ended(self) -> None:
        """The endings of the failed pods the scheduler saw (``PodLogSource.ended``), once each."""
        if self.target is None or self.source.ended is None:
            return
        for body in self.source.ended(self.target):
            self._note_endings(body, pods.view_of(self.target.kind, body, self.layout))

    def _note_endings(self, body: dict[str, Any], view: pods.PodView) -> None:
        for ending in pods.termination_lines(body, now_ns=time.time_ns()):
            if ending.key in self._endings:
                continue
            self._endings.add(ending.key)
            self._put(Item(ending.ns, line_hash(view.name, ending.container or "-", ending.text), ending.text,
                           view.node or None, view.rank, view.uid))

    def _start_follows(self, view: pods.PodView) -> None:
        """A follow stream for each started container of ``view`` that has none running."""
        if not view.node:
            return
        for container in view.containers:
            if not view.started.get(container):
                continue
            key = (view.name, container)
            follow = self._follows.get(key)
            if follow is None:
                follow = self._follows[key] = Follow(view.name, container, uid=view.uid)
            elif follow.uid != view.uid:  # replaced under the same name: the new pod's stream
                if follow.task is not None:
                    follow.task.cancel()
                follow.uid, follow.task = view.uid, None
            elif follow.task is not None or not view.running.get(container):
                # running, or ended for good: a follow that ended is opened again only for a container
                # running again (restarted in place)
                continue
            follow.task = asyncio.ensure_future(self._follow_forever(view.uid, follow))
            follow.task.set_name(f"podlog:{view.name}/{container}")

    def _gone(self, uid: str) -> None:
        """A pod was deleted: its streams are closed (the log goes with it; a kubelet that keeps a deleted
        pod's stream open must not hold ours) and never reopened."""
        view = self._views.pop(uid, None)
        if view is not None:
            view.finished = True
        for follow in self._follows.values():
            if follow.uid == uid and follow.task is not None:
                follow.task.cancel()
                follow.task = None

    async def _follow_forever(self, uid: str, follow: Follow) -> None:
        assert self.target is not None
        delay = self._config.retry_s
        while True:
            since = max(follow.newest, self._since())
            try:
                async with self.source.open_log(self.target.namespace, follow.pod, follow.container,
                                                since or None) as response:
                    self.source.ok()
                    await self._read_stream(uid, follow, response)
                delay = self._config.retry_s
            except asyncio.CancelledError:
                raise
            except ApiException as exc:
                if exc.status in (400, 404) and uid not in self._views:
                    break  # the pod is gone
                if exc.status != 400:  # 400: the container is not (yet/again) running; no alarm
                    self.source.failed(f"reading the log of {follow.pod}/{follow.container}", exc)
            except Exception as exc:
                self.source.failed(f"reading the log of {follow.pod}/{follow.container}", exc)
            view = self._views.get(uid)
            if view is None or (view.finished and not view.running.get(follow.container)):
                break  # over: its log will not grow (and a finished pod's stream was read to its end)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._config.max_backoff_s)
        if follow.task is asyncio.current_task():
            follow.task = None

    async def _read_stream(self, uid: str, follow: Follow, response: Any) -> None:
        """Lines of one open stream into the buffer, each bounded (``max_line``), until it ends."""
        limit = self._config.max_line
        pending = bytearray()
        dropped = 0
        while True:
            chunk = await response.content.read(self._config.chunk)
            if not chunk:
                break
            start = 0
            while True:
                nl = chunk.find(b"\n", start)
                piece = chunk[start:] if nl < 0 else chunk[start:nl]
                room = limit + 40 - len(pending)  # + the timestamp prefix
                if room > 0:
                    pending += piece[:room]
                dropped += max(0, len(piece) - max(room, 0))
                if nl < 0:
                    break
                start = nl + 1
                self._take(uid, follow, bytes(pending), dropped)
                pending.clear()
                dropped = 0
        if pending:
            self._take(uid, follow, bytes(pending), dropped)

    def _take(self, uid: str, follow: Follow, raw: bytes, dropped: int) -> None:
        """One line read from a stream: skipped when read before (a reconnect), else buffered."""
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        ns, text = pods.split_timestamp(text)
        if ns is None:
            ns = follow.newest  # a line without a timestamp belongs with the one before it
        if len(text) > self._config.max_line:
            dropped += len(text.encode("utf-8", errors="replace")) - self._config.max_line
            text = text.encode("utf-8", errors="replace")[:self._config.max_line].decode("utf-8", errors="replace")
        if dropped:
            text += f" {MARKER} {dropped} bytes of this line dropped"
        digest = line_hash(follow.pod, follow.container, text)
        if ns < follow.newest or (ns == follow.newest and digest in follow.at_newest):
            return  # read before this stream was reopened
        if ns > follow.newest:
            follow.newest, follow.at_newest = ns, set()
        follow.at_newest.add(digest)
        view = self._views.get(uid)
        self._put(Item(ns, digest, text, (view.node if view else "") or None, view.rank if view else None, uid))

    def _put(self, item: Item) -> None:
        if len(self._buffer) >= self._config.max_buffer:
            self._buffer.popleft()
            self.overflowed += 1
        self._buffer.append(item)

    # -- reading -------------------------------------------------------------------------------

    async def read(self) -> list[tuple[Stream, list[signals.LogLine]]]:
        """The lines that arrived since the last round, in timestamp order, charged to the stream."""
        for s in self.files:
            s.lines = {}
        if not self.files:
            self._buffer.clear()
            return []
        self._recall_ended()
        out: Out = {id(s): [] for s in self.files}
        s = self.files[0]
        now = self._clock.now()
        if self.overflowed:
            self._line(s, out, f"{MARKER} {self.overflowed} pod-log lines dropped: more than "
                       f"{self._config.max_buffer} waited to be read", now=now)
            self.overflowed = 0
        items = sorted(self._buffer, key=lambda i: i.ns)
        self._buffer.clear()
        retired = self.source.retired(self.target) if self.source.retired and self.target else {}
        for item in items:
            if item.ns > retired.get(item.uid, item.ns) or self._read_before(s, item.ns, item.digest):
                continue  # printed, or ended, after our suspend took its pod away: our restart's doing
            if item.ns < self._replaced.get(item.uid, 0) and not self._runs(item.uid):
                continue  # an ended pod of the old attempt, heard after the new one was seen (attempt_replaced)
            self._line(s, out, item.text, node=item.node, rank=item.rank, key=(item.ns, item.digest), now=now)
        return [(f, out[id(f)]) for f in self.files]

    def attempt_replaced(self, at: float) -> None:
        """What the pods seen so far and no longer running still deliver from before ``at`` is the old
        attempt's: a PyTorchJob's failed Worker is re-created under its name while the job stays Running,
        and the old pod's ending ("killed") could arrive after the listing showed the new attempt and stop
        the healthy re-run. Running pods (survivors, or the re-created one seen early) keep every line."""
        for uid in self._uids:
            self._replaced[uid] = max(self._replaced.get(uid, 0), int(at * pods.NS))

    def _runs(self, uid: str) -> bool:
        view = self._views.get(uid)
        return view is not None and not view.finished and any(view.running.values())

    async def observe_ends(self) -> None:
        """No attempt runs: nothing is read (lines wait in the buffer until the attempt's start places them)."""

    def _placed_text(self, s: Stream, at: int) -> str:
        return f"{s.path}: pod-log lines from {pods.format_time(at)} on (the attempt's start)"


def books(api: kubernetes_asyncio.client.ApiClient, config: Config | None = None, *,
          ended: Callable[[pods.Target], Sequence[dict[str, Any]]] | None = None,
          retired: Callable[[pods.Target], Mapping[str, int]] | None = None,
          ) -> tuple[sources.BookFactory, PodLogSource]:
    """A book factory for ``engine.Engine(log_books=...)`` and the source it shares (the caller closes
    ``api``; ``ended``, ``retired``: see ``PodLogSource``)."""
    source = PodLogSource(api, config)
    source.ended, source.retired = ended, retired

    def make(workload: str, job_id: str, clock: clock_mod.Clock, pool: fileio.FilePool | None) -> sources.LogBook:
        del pool  # no files
        return PodLogBook(workload, job_id, clock, source)

    return make, source

