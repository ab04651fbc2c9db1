"""The kopf operator shell: ``trainguard operator`` runs the engine inside a Kubernetes operator.

Place in the loop: the outermost shell, beside ``cli/run.py`` (standalone). It wires the same engine
(scheduler adapter, audit store, policies, catalog) and adds the Kubernetes surface:

- RecoveryPolicy objects are watched (``on.event``: no finalizers, no annotations written on them),
  validated by ``k8s/policies.py``, and the accepted ones hot-swapped into the engine; each gets an
  Accepted/Invalid condition with observedGeneration;
- one WorkloadRecovery per discovered opted-in Slurm job is created, its status kept as a projection
  of the engine (``k8s/status.py``) by a reconcile loop (level-triggered, every
  ``status_interval_s`` and at once after each audit record), and garbage-collected
  ``retention_s`` after the engine stopped tracking the job;
- ``spec.overrides`` of a WorkloadRecovery apply to its workload (``mode: Monitor`` forces Monitor; the
  budgets and the hang timeout become per-workload overrides in the engine);
- RecoveryPolicy name clashes across namespaces are resolved by one rule (``k8s/policies.py``);
- Events for anomalies, verdicts, advice and outcomes (``k8s/events.py``).

The cluster-wide Action switch (``allow_action``) sits on top of every policy's mode. One instance
acts: standalone (one replica, Recreate strategy), or, with ``peering``, only the replica holding a
coordination.k8s.io Lease runs the engine and the reconcile loop (``k8s/lease.py``); the others
keep watching and take over when the Lease expires. Each term claims a fencing token in the audit
store that every scheduler mutation carries, and a replica that loses the Lease cancels its
in-flight recoveries at once. The audit store stays the durable log; status
and Events are the view.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import logging
import os
import socket
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
import kopf
from aiohttp import web
from kubernetes_asyncio import client as k8s
from pydantic import ValidationError

from trainguard import engine as engine_mod
from trainguard import health as health_mod
from trainguard import settings as settings_mod
from trainguard import shards as shards_mod
from trainguard.act import ports as act_ports
from trainguard.detect import catalog as catalog_mod
from trainguard.http import api as http_api
from trainguard.http import app as http_app
from trainguard.k8s import (
    client,
    coalesce,
    control,
    events,
    lease,
    policies,
    recovery,
    review,
    shard_leases,
    slinky_nodes,
    status,
)
from trainguard.k8s import kube_signals as kube_signals_mod
from trainguard.k8s.kubejobs import wiring as kube_wiring
from trainguard.model import actions, clock, vocab
from trainguard.policy import loader
from trainguard.schedulers import base, composite, factory, tokens
from trainguard.signals import gpu_metrics as gpu_metrics_mod
from trainguard.signals import loki, loki_book, sources, victorialogs
from trainguard.store import audit, database

logger = logging.getLogger("trainguard.operator")

REPORT_QUEUE: Final = 10_000
"""Engine records waiting for their Event; bounded so an API outage cannot grow memory without end."""
URGENT_KINDS: Final = frozenset({vocab.AuditKind.ADVICE.value, vocab.AuditKind.OUTCOME.value,
                                  vocab.AuditKind.WATCHDOG.value})
"""Records whose status change is written within the coalescer's settle time (a recovery starts,
ends or is given up); other records' changes go out with the next timed flush."""
GROUP: Final = "trainguard.dev"
VERSION: Final = "v1alpha1"
POLICIES: Final = "recoverypolicies"


@dataclass(frozen=True)
class OperatorConfig:
    """Everything ``trainguard operator`` was started with: one explicit object rather than globals or
    environment reads scattered through the handlers, so a test can build it and print it."""

    scheduler: str
    """Scheduler spec, as for ``trainguard run`` (slurm-local | slurm-ssh://... | slurm-rest://...), or
    ``kubernetes``: JobSets and PyTorchJobs annotated ``trainguard.dev/policy`` (``k8s/kubejobs``)."""
    namespaces: tuple[str, ...] = ()
    """Namespaces whose RecoveryPolicy/WorkloadRecovery objects are served; empty with clusterwide."""
    clusterwide: bool = False
    workload_namespace: str = "default"
    """Where WorkloadRecovery objects of Slurm jobs are created (the operator's own namespace)."""
    allow_action: bool = False
    """Cluster-wide Action switch; off: every policy behaves as Monitor."""
    db_url: str = database.DEFAULT_DB_URL
    peering: str | None = None
    """None: standalone (one replica). A name: act only while holding the Lease of that name in
    ``workload_namespace`` (several replicas, one active; ``k8s/lease.py``)."""
    liveness_endpoint: str | None = None
    """kopf's own liveness endpoint (optional; the probes use ``http_listen``)."""
    http_listen: str = http_app.OFF
    """``HOST:PORT`` of /healthz, /readyz and /metrics (``trainguard.http``), or ``off``."""
    http_routes: tuple[web.RouteDef, ...] = ()
    """Further routes served on ``http_listen`` (the console's, passed by the CLI: the console is a
    sibling shell this module does not import)."""
    http_token_file: Path | None = None
    """Bearer tokens of the HTTP API (``http.auth``); other tokens are reviewed by Kubernetes
    (``k8s/review.py``: TokenReview + SubjectAccessReview on our CRDs)."""
    poll_s: float = settings_mod.EngineSettings.discovery_interval_s
    max_actions_per_hour: int | None = settings_mod.EngineSettings.max_actions_per_hour
    """The administrator's caps above every policy (``settings.EngineSettings``, ``policy.blast_radius``)."""
    max_nodes_out: int | None = settings_mod.EngineSettings.max_nodes_out
    max_nodes_out_share: float | None = settings_mod.EngineSettings.max_nodes_out_share
    status_interval_s: float = 2.0
    """Seconds between two reconcile rounds of WorkloadRecovery objects (each round lists them once)."""
    retention_s: float = 3600.0
    """How long a WorkloadRecovery stays after the engine stopped tracking its job, so the outcome
    stays visible (``kubectl get recoveries``) before it is garbage-collected."""
    jwt: str | tokens.TokenSource | None = None
    scheduler_env: dict[str, str] | None = None
    """Environment of the Slurm client commands (default: this process's)."""
    rest_fallback: str = "slurm-local"
    patterns_files: tuple[Path, ...] = ()
    node_pool_label: str = "trainguard.dev/node-pool"
    """The Kubernetes node label whose value is a node's pool: pools stand in for partitions in the
    blast-radius limits (``k8s/kubejobs/nodes.pool_of``); nodes without it form one pool."""
    slinky_namespace: str | None = None
    """Namespace of a Slinky cluster's slurmd pods; when set, the Slurm scheduler is wrapped in
    ``k8s.slinky_nodes.SlinkyScheduler``: a lemon node is taken out of service by the executor as a
    cordon of its Kubernetes node (policy allows ``drainNode`` or ``cordonNode``), like any drain."""
    victorialogs: victorialogs.Config | None = None
    """Read job output from this VictoriaLogs server instead of the output files (``signals.sources``)."""
    loki: loki_book.Config | None = None
    """Read job output from this Loki instead of the output files (not together with ``victorialogs``)."""
    gpu_metrics: gpu_metrics_mod.GpuMetricsConfig | None = None
    """DCGM evidence from Prometheus/VictoriaMetrics (``--prometheus-url``); None: not configured."""
    shards: int = 1
    """> 1: every replica runs the engine on the shards whose Kubernetes Leases it holds
    (``k8s/shard_leases.py``, docs/sharding.md); not together with ``peering``."""
    shard_key: shards_mod.ShardKey = "cluster"
    replica_id: str = ""


@dataclass
class Shell:
    """The running operator's state, captured by the handlers (no module globals)."""

    config: OperatorConfig
    api: client.ApiClient | None = None
    """kubernetes_asyncio client with kopf's credentials (``k8s/client.py``); None until started."""
    engine: engine_mod.Engine | None = None
    scheduler: base.Scheduler | None = None
    store: audit.AuditStore | None = None
    book: policies.PolicyBook = field(default_factory=policies.PolicyBook)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    """Tasks of the whole run (leader election)."""
    term_tasks: list[asyncio.Task[None]] = field(default_factory=list)
    """Tasks of the current term as the acting instance (engine, reconcile loop)."""
    term_stop: asyncio.Event = field(default_factory=asyncio.Event)
    elector: lease.Elector | None = None
    catalog: catalog_mod.Catalog | None = None
    overrides: dict[str, vocab.Mode] = field(default_factory=dict)
    records: asyncio.Queue[tuple[str, str, dict[str, object]]] = field(
        default_factory=lambda: asyncio.Queue(maxsize=REPORT_QUEUE))
    """Workload -> forced mode from WorkloadRecovery ``spec.overrides.mode`` (kept across terms)."""
    policy_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Workload -> the other WorkloadRecovery overrides, in the engine's keys (kept across terms)."""
    engine_settings: settings_mod.EngineSettings = field(default_factory=settings_mod.EngineSettings)
    untracked_since: dict[str, float] = field(default_factory=dict)
    stats: status.SyncStats = field(default_factory=status.SyncStats)
    coalescer: coalesce.StatusCoalescer = field(default_factory=coalesce.StatusCoalescer)
    """WorkloadRecovery status writes: latest state per object, bounded writes/s (``k8s/coalesce.py``)."""
    ownership: shards_mod.Ownership | None = None
    """With ``config.shards`` > 1: the shards this replica holds (Kubernetes Leases)."""
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    """WorkloadRecovery name -> the object as last read or created (its uid names it in Events)."""
    clock: clock.Clock = field(default_factory=clock.SystemClock)
    log_client: victorialogs.Client | loki.LokiClient | None = None
    log_books: sources.BookFactory = sources.file_books
    """Where the engine reads job output from (set once at start from ``config.victorialogs`` or ``config.loki``)."""
    kube_signals: kube_signals_mod.KubeSignals | None = None
    """Pod logs and Node conditions of Kubernetes workloads (``--scheduler kubernetes``; ``k8s/kube_signals.py``)."""
    pause_mirror: control.PauseMirror | None = None
    """The ``trainguard-control`` ConfigMap's pause, mirrored into the store (``k8s/control.py``)."""
    health: health_mod.Health = field(default_factory=health_mod.Health)
    """Liveness (heartbeat) and readiness (scheduler, store) of this replica (``trainguard.health``)."""

    def now(self) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.clock.now(), tz=datetime.UTC)

    # -------------------------------------------------------------- policies

    def policies_changed(self) -> None:
        """Rebuild the PolicySet from the accepted objects and hand it to the engine."""
        if self.engine is not None:
            self.engine.update_policies(self.book.policy_set())
        self.wake.set()

    def workload_of(self, body: dict[str, Any]) -> str | None:
        """The engine's workload id a WorkloadRecovery is about: our annotation on the objects we
        create, else its ``spec.workload`` (an object a person created, e.g. to force Monitor before
        the job is seen). An empty ``cluster`` means this operator's only scheduler: the job is
        looked up among the tracked ones by id (None until it is tracked)."""
        workload = ((body.get("metadata") or {}).get("annotations") or {}).get(status.WORKLOAD_ANNOTATION)
        if workload:
            return str(workload)
        ref = (body.get("spec") or {}).get("workload") or {}
        if ref.get("kind") in (recovery.WorkloadKind.JOBSET, recovery.WorkloadKind.PYTORCH_JOB) and ref.get("id"):
            namespace = (body.get("metadata") or {}).get("namespace") or self.config.workload_namespace
            return f"k8s/{namespace}/{ref['kind']}/{ref['id']}"
        if ref.get("kind") != recovery.WorkloadKind.SLURM_JOB or not ref.get("id"):
            return None
        if ref.get("cluster"):
            return f"slurm/{ref['cluster']}/{ref['id']}"
        tracked = self.engine.runtimes if self.engine is not None else {}
        return next((w for w in tracked if w.startswith("slurm/") and w.endswith(f"/{ref['id']}")), None)

    def override_mode(self, body: dict[str, Any], deleted: bool) -> None:
        """A WorkloadRecovery's ``spec.overrides`` apply to its workload: ``mode: Monitor`` forces
        Monitor (Action never raises authority, k8s/recovery.py, so it clears the override); the
        budgets and the hang timeout go to the engine as per-workload overrides."""
        workload = self.workload_of(body)
        if not workload:
            return
        try:
            mode, values = recovery.engine_overrides((body.get("spec") or {}).get("overrides"))
        except ValidationError as exc:  # the CRD schema has the same bounds; only a stale schema gets here
            logger.warning("%s: WorkloadRecovery overrides ignored: %s", workload, exc)
            mode, values = None, {}
        if deleted:
            mode, values = None, {}
        if self.policy_overrides.get(workload, {}) != values:
            if values:
                self.policy_overrides[workload] = values
            else:
                self.policy_overrides.pop(workload, None)
            logger.info("%s: policy overrides %s", workload, values or "cleared")
            if self.engine is not None:
                self.engine.set_workload_overrides(workload, dict(values))
                self.wake.set()
        wanted = mode
        if self.overrides.get(workload) == wanted:
            return
        if wanted is None:
            self.overrides.pop(workload, None)
        else:
            self.overrides[workload] = wanted
        logger.info("%s: mode override %s", workload, wanted or "cleared")
        if self.engine is not None:
            self.engine.set_mode_override(workload, wanted)
            self.wake.set()

    # -------------------------------------------------------------- engine records -> status + Events

    async def on_record(self, kind: str, workload: str, payload: dict[str, object]) -> None:
        """Engine listener: queue the record for the reporter and return at once. The engine awaits
        its listeners before it acts, so a slow or unreachable API server must never be waited on
        here; a full queue drops the Event (logged) — status catches up in the next reconcile round."""
        try:
            self.records.put_nowait((kind, workload, payload))
        except asyncio.QueueFull:
            logger.warning("%s: report queue full; %s Event dropped (the audit log has it)", workload, kind)

    async def report_forever(self, stop: asyncio.Event) -> None:
        """Turn queued engine records into WorkloadRecovery updates and Events, in order."""
        while not stop.is_set() or not self.records.empty():
            try:
                kind, workload, payload = await asyncio.wait_for(self.records.get(), timeout=1.0)
            except TimeoutError:
                continue
            try:
                await self.report(kind, workload, payload)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("%s: reporting %s failed", workload, kind)

    async def report(self, kind: str, workload: str, payload: dict[str, object]) -> None:
        """Bring the workload's WorkloadRecovery up to date, then post the record's Event."""
        if self.engine is None or self.api is None:
            return
        rt = self.engine.runtimes.get(workload)
        if rt is None:
            return
        kube = kube_wiring.kube_of(self.scheduler)
        own = kube_wiring.workload_ref(kube, workload) if kube is not None else None
        if own is not None:  # a JobSet/PyTorchJob: Events on the workload itself, and its WorkloadRecovery
            draft = events.draft_for(kind, payload)
            if draft is not None:
                await events.post(self.api, own, draft, self.now())
            try:
                await self._object(rt)
            except (client.ApiException, aiohttp.ClientError, TimeoutError, ValueError) as exc:
                logger.warning("%s: cannot update its WorkloadRecovery: %s", workload, client.message_of(exc))
                return
            self.coalescer.mark(workload, urgent=kind in URGENT_KINDS)
            return
        try:
            obj = await self._object(rt)
        except (client.ApiException, aiohttp.ClientError, TimeoutError, ValueError) as exc:
            logger.warning("%s: cannot update its WorkloadRecovery: %s", workload, client.message_of(exc))
            return
        self.coalescer.mark(workload, urgent=kind in URGENT_KINDS)
        metadata = obj.get("metadata") or {}
        ref = events.ObjectRef(recovery.API_VERSION, recovery.KIND, str(metadata.get("name")),
                               self.config.workload_namespace, metadata.get("uid"))
        draft = events.draft_for(kind, payload)
        if draft is not None:
            await events.post(self.api, ref, draft, self.now())

    async def _view(self, rt: engine_mod.WorkloadRuntime) -> status.WorkloadView:
        steps: list[actions.ActionRecord] = []
        item = rt.last_advice
        if item is not None and self.store is not None:
            steps = await self.store.actions_for(item.workload, item.attempt, item.generation)
        return status.view_of(rt, steps)

    async def _object(self, rt: engine_mod.WorkloadRuntime) -> dict[str, Any]:
        """The workload's WorkloadRecovery as known (read or created once); its status is written by the
        coalescer (a new object's at once)."""
        name = status.object_name(rt.workload)
        obj = self.objects.get(name)
        if obj is None:
            obj = await self._ensure(rt)
        return obj

    async def write_status(self, workload: str) -> None:
        """The coalescer's write: the workload's status as the engine shows it now (read, compare, patch)."""
        rt = self.engine.runtimes.get(workload) if self.engine is not None else None
        if rt is not None:
            await self._ensure(rt)

    async def _ensure(self, rt: engine_mod.WorkloadRuntime, observed: dict[str, Any] | None = None) -> dict[str, Any]:
        """Create the workload's WorkloadRecovery if missing; sync its status; return the object."""
        assert self.api is not None
        view = await self._view(rt)
        namespace = status.namespace_of(view.workload, self.config.workload_namespace)
        name = status.object_name(view.workload)
        owner = None
        kube = kube_wiring.kube_of(self.scheduler)
        if kube is not None:
            owner = kube_wiring.owner_of(kube, view.workload)
            if owner is None and status.kube_workload(view.workload) is not None:
                raise ValueError(f"{view.workload}: uid not known yet; its WorkloadRecovery waits for the watch")
        async with self.lock:
            obj = observed
            if obj is None:
                try:
                    obj = await status.get_object(self.api, namespace, name)
                except client.ApiException as exc:
                    if not client.is_not_found(exc):
                        raise
            if obj is None:
                try:
                    obj = dict(await k8s.CustomObjectsApi(self.api).create_namespaced_custom_object(
                        recovery.GROUP, recovery.VERSION, namespace, recovery.PLURAL,
                        status.desired_object(view, namespace, owner)))
                    logger.info("created WorkloadRecovery %s/%s for %s", namespace, name, view.workload)
                except client.ApiException as exc:
                    if not client.is_conflict(exc):  # AlreadyExists: someone (a retry of ours) was first
                        raise
                    obj = await status.get_object(self.api, namespace, name)
            await status.sync_status(self.api, namespace, name, view, now=self.now(), observed=obj, stats=self.stats)
            self.untracked_since.pop(name, None)
            self.objects[name] = {"metadata": {k: (obj.get("metadata") or {}).get(k) for k in ("name", "uid")}}
            return obj

    # -------------------------------------------------------------- the reconcile loop

    async def reconcile(self) -> None:
        """One round: every tracked workload has an up-to-date WorkloadRecovery; the ones no longer
        tracked are deleted after the retention; every policy's status is current."""
        if self.engine is None or self.api is None:
            return
        namespace = self.config.workload_namespace
        objects = k8s.CustomObjectsApi(self.api)
        listed = await objects.list_namespaced_custom_object(
            recovery.GROUP, recovery.VERSION, namespace, recovery.PLURAL,
            label_selector=f"{status.MANAGED_BY_LABEL}={status.MANAGED_BY}")
        existing = status.names_of(_items(listed))
        tracked: set[str] = set()
        for rt in list(self.engine.runtimes.values()):
            try:
                name = status.object_name(rt.workload)
            except ValueError:
                continue  # a workload id no WorkloadRecovery kind describes
            mine = status.namespace_of(rt.workload, namespace) == namespace
            if mine:
                tracked.add(name)
            try:
                if mine and name in existing:
                    if status.differs(await self._view(rt), existing[name], now=self.now()):
                        self.coalescer.mark(rt.workload)  # written by the coalescer, within the write budget
                elif mine or name not in self.objects:
                    await self._ensure(rt)  # a new object: created with its status at once
                else:
                    # A Kubernetes workload's object lives in the workload's namespace, outside the
                    # listing above: the coalescer's write reads it, and patches only a difference.
                    self.coalescer.mark(rt.workload)
            except (client.ApiException, ValueError) as exc:
                logger.warning("WorkloadRecovery %s: %s", name, client.message_of(exc))
        now = self.clock.now()
        for name in set(existing) - tracked:
            if self.ownership is not None and not self.ownership.owns(
                    str(((existing[name].get("metadata") or {}).get("annotations") or {}).get(
                        status.WORKLOAD_ANNOTATION, ""))):
                continue  # another replica's shard (or a shard unknown): its holder collects it
            since = self.untracked_since.setdefault(name, now)
            if now - since < self.config.retention_s:
                continue
            try:
                await objects.delete_namespaced_custom_object(recovery.GROUP, recovery.VERSION, namespace,
                                                              recovery.PLURAL, name)
                logger.info("deleted WorkloadRecovery %s/%s: job no longer tracked", namespace, name)
            except client.ApiException as exc:
                if not client.is_not_found(exc):
                    logger.warning("cannot delete WorkloadRecovery %s/%s: %s", namespace, name,
                                   client.message_of(exc))
                    continue
            self.untracked_since.pop(name, None)
            self.objects.pop(name, None)
        await self._policy_statuses()
        await self._mirror_pause()

    async def _mirror_pause(self) -> None:
        """The runtime pause set with ``kubectl`` (``k8s/control.py``): mirrored into the store on change."""
        if self.api is None or self.store is None:
            return
        if self.pause_mirror is None:
            self.pause_mirror = control.PauseMirror(self.config.workload_namespace)
        try:
            await self.pause_mirror.sync(self.api, self.store, self.clock.now())
        except client.API_ERRORS as exc:
            logger.warning("cannot read ConfigMap %s/%s (the runtime pause): %s", self.config.workload_namespace,
                           control.CONFIGMAP, client.message_of(exc))

    async def _policy_statuses(self) -> None:
        assert self.api is not None and self.engine is not None
        verdicts = self.book.verdicts()
        conflicts = self.book.conflicts()
        covered: dict[str, int] = {}
        for rt in self.engine.runtimes.values():
            if rt.spec is not None:
                covered[rt.policy_name] = covered.get(rt.policy_name, 0) + 1
        for key, entry in list(self.book.entries.items()):
            previous = policies.parse_status(entry.status)
            name = entry.policy.name if entry.policy is not None else ""
            desired = policies.status_of(entry, verdicts[key], covered.get(name, 0), previous, self.now(),
                                         conflict=conflicts.get(key))
            if desired == previous:
                continue
            body = {"metadata": {"resourceVersion": entry.resource_version},
                    "status": desired.model_dump(mode="json", by_alias=True)}
            try:
                answer = dict(await client.merge_patch(
                    k8s.CustomObjectsApi(self.api).patch_namespaced_custom_object_status,
                    GROUP, VERSION, key[0], POLICIES, key[1], body=body))
            except client.ApiException as exc:
                # 409: the object changed since we read it; its watch event brings the new version.
                logger.info("RecoveryPolicy %s/%s status not written: %s", key[0], key[1], client.message_of(exc))
                continue
            if self.book.entries.get(key) is entry:
                self.book.put(policies.read(answer))
            if previous is None or previous.observed_generation != desired.observed_generation:
                accepted, _, message = verdicts[key]
                draft = events.Draft(events.NORMAL if accepted else events.WARNING,
                                     events.POLICY_ACCEPTED if accepted else events.POLICY_INVALID, message)
                ref = events.ObjectRef(f"{GROUP}/{VERSION}", "RecoveryPolicy", key[1], key[0],
                                       (answer.get("metadata") or {}).get("uid"))
                await events.post(self.api, ref, draft, self.now())

    async def reconcile_forever(self, stop: asyncio.Event) -> None:
        """Reconcile every ``status_interval_s``, and at once when woken (policy change, new record)."""
        while not stop.is_set():
            self.wake.clear()
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                raise
            except client.API_ERRORS as exc:
                # The API or the network hiccuped (a 429 while the apiserver's storage initialises, a
                # timeout): one line, not a traceback; the next round recomputes everything.
                logger.warning("reconcile round failed: %s; retrying in %.1f s", client.message_of(exc),
                               self.config.status_interval_s)
            except Exception:
                logger.exception("reconcile round failed; retrying in %.1f s", self.config.status_interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=self.config.status_interval_s)

    # -------------------------------------------------------------- start and stop

    async def start(self, settings: kopf.OperatorSettings) -> None:
        """Open the scheduler, store and API client, load the policies, start the engine."""
        config = self.config
        self.api = client.from_connection_info(login(settings))
        catalog = catalog_mod.load_catalog(extra_files=list(config.patterns_files))
        fallback = None
        env = dict(config.scheduler_env if config.scheduler_env is not None else os.environ)
        if "slurm-rest:" in config.scheduler and config.rest_fallback != "none":
            fallback = factory.open_scheduler(config.rest_fallback, env=env)
        opened: list[base.Scheduler] = []
        for spec in (part.strip() for part in config.scheduler.split(",") if part.strip()):
            if spec == kube_wiring.SPEC:
                # the served namespaces (--namespace); --all-namespaces: every namespace
                opened.append(await kube_wiring.open_scheduler(namespaces=config.namespaces,
                                                               node_pool_label=config.node_pool_label))
            elif config.slinky_namespace:
                # Slurm on Slinky: its nodes are taken out of service by a cordon, through the executor
                opened.append(slinky_nodes.SlinkyScheduler(
                    factory.open_scheduler(spec, env=env, jwt=config.jwt, fallback=fallback), self.api,
                    config.slinky_namespace))
            else:
                opened.append(factory.open_scheduler(spec, env=env, jwt=config.jwt, fallback=fallback))
        self.scheduler = opened[0] if len(opened) == 1 else composite.CompositeScheduler(opened)
        engine_settings = settings_mod.EngineSettings(discovery_interval_s=config.poll_s,
                                                      allow_action=config.allow_action,
                                                      max_actions_per_hour=config.max_actions_per_hour,
                                                      max_nodes_out=config.max_nodes_out,
                                                      max_nodes_out_share=config.max_nodes_out_share)
        context = audit.AuditContext(policy_version="kubernetes", catalog_version=catalog.version,
                                     settings_fingerprint=engine_settings.fingerprint())
        self.store = await database.open_store(config.db_url, context=context)
        self.book.home = config.workload_namespace  # its policies win name clashes (k8s/policies.py)
        # Policies first, so a job failing in the first seconds is already covered.
        for namespace in config.namespaces or (None,):
            for body in await _patiently(functools.partial(self._list_policies, namespace)):
                self.book.put(policies.read(body))
        self.catalog, self.engine_settings = catalog, engine_settings
        if config.victorialogs is not None and self.log_client is None:
            self.log_books, self.log_client = victorialogs.books(config.victorialogs)
        if config.loki is not None and self.log_client is None:
            self.log_books, self.log_client = loki_book.books(config.loki)
        if "kubernetes" in {p.strip() for p in config.scheduler.split(",")} and self.kube_signals is None:
            self.kube_signals = await kube_signals_mod.open_signals()
            self.log_books = kube_signals_mod.routed(self.kube_signals.log_books, self.log_books)
        if config.shards > 1:
            if config.peering is not None:
                raise ValueError("--shards and --peering exclude each other: each shard has its own Lease")
            shard_spec = shards_mod.ShardSpec(
                config.shards, config.shard_key,
                config.replica_id or f"{os.environ.get('POD_NAME') or socket.gethostname()}-{os.getpid()}")
            self.ownership = shards_mod.Ownership(shard_spec, shard_leases.KubeShardLeases(
                self.api, config.workload_namespace, self.store, shard_spec, self.clock))
            await self._begin_term()
        elif config.peering is None:
            await self._begin_term()
        else:
            self.health.standby = f"not holding the Lease {config.peering}"
            identity = f"{os.environ.get('POD_NAME') or socket.gethostname()}-{os.getpid()}"
            self.elector = lease.Elector(self.api, config.workload_namespace, config.peering, identity,
                                         clock=self.clock)
            self.tasks.append(_spawn(self._lead_forever(), "leader-election"))
        logger.info("trainguard operator: scheduler %s, audit %s, action switch %s, policies %s, recoveries in %s, %s",
                    config.scheduler, database.safe_url(config.db_url), "ON" if config.allow_action else "off",
                    self.book.policy_set().names(), config.workload_namespace,
                    f"lease {config.peering}" if config.peering else "standalone")

    async def _begin_term(self) -> None:
        """Start acting: a fresh engine (which first resumes pending advice) and the reconcile loop.

        With peering, the term first claims leadership in the audit store; every scheduler mutation
        of the term is fenced with that token (``k8s/lease.py``)."""
        assert self.scheduler is not None and self.store is not None and self.catalog is not None
        fence: act_ports.Fence = act_ports.ALWAYS_LEADER
        if self.elector is not None:
            token = await self.store.claim_leadership(self.elector.name, self.elector.identity, at=self.clock.now())
            logger.info("leadership claimed in the audit store: %s", token.describe())
            fence = lease.LeaseFence(self.elector, token)
        self.term_stop = asyncio.Event()
        self.engine = engine_mod.Engine(
            self.scheduler, self.store, self.book.policy_set(), self.catalog, clock_=self.clock,
            settings=self.engine_settings, listeners=[self.on_record], health=self.health, fence=fence,
            log_books=self.log_books,
            node_sources=self.kube_signals.node_sources if self.kube_signals is not None else (),
            gpu_metrics_=gpu_metrics_mod.GpuMetrics(self.config.gpu_metrics) if self.config.gpu_metrics else None,
            shards=self.ownership,
        )
        self.health.standby = None
        for workload, mode in self.overrides.items():
            self.engine.set_mode_override(workload, mode)
        for workload, values in self.policy_overrides.items():
            self.engine.set_workload_overrides(workload, dict(values))
        self.term_tasks = [
            _spawn(self.engine.run(self.term_stop), "engine"),
            _spawn(self.reconcile_forever(self.term_stop), "workloadrecovery-reconcile"),
            _spawn(self.report_forever(self.term_stop), "workloadrecovery-report"),
            _spawn(self.coalescer.run(self.term_stop, self.write_status), "workloadrecovery-status"),
        ]

    async def _end_term(self, *, abort: bool = False) -> None:
        """Stop acting: the engine stops discovery and waits for in-flight recoveries, or, with
        ``abort`` (the Lease is lost: another replica may act already), cancels them at once."""
        if abort and self.engine is not None:
            self.engine.abort()
        self.term_stop.set()
        self.wake.set()
        tasks, self.term_tasks = self.term_tasks, []
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self.engine = None
        if self.config.peering is not None:
            self.health.standby = f"not holding the Lease {self.config.peering}"

    async def _lead_forever(self) -> None:
        """Act only while holding the Lease (``k8s/lease.py``)."""
        assert self.elector is not None
        while not self.stop.is_set():
            leading = await self.elector.step()
            if leading and self.engine is None:
                logger.info("leading: starting the engine")
                try:
                    await self._begin_term()
                except Exception as exc:  # the store is unreachable: no claim, no token to act with
                    logger.error("cannot claim leadership in the audit store (retrying at the next renewal): "
                                 "%s: %s", type(exc).__name__, exc)
            elif not leading and self.engine is not None:
                logger.warning("lost the lease: stopping the engine and its in-flight recoveries now")
                await self._end_term(abort=True)
                logger.warning("lost the lease: engine stopped")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), timeout=self.elector.timing.renew_interval_s)

    async def _list_policies(self, namespace: str | None) -> list[dict[str, Any]]:
        assert self.api is not None
        objects = k8s.CustomObjectsApi(self.api)
        if namespace is None:
            return _items(await objects.list_cluster_custom_object(GROUP, VERSION, POLICIES))
        return _items(await objects.list_namespaced_custom_object(GROUP, VERSION, namespace, POLICIES))

    async def close(self) -> None:
        """Stop the engine (in-flight recoveries finish), give up the Lease, close everything;
        safe to call twice."""
        self.stop.set()
        self.wake.set()
        tasks, self.tasks = self.tasks, []
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._end_term()
        if self.elector is not None:
            await self.elector.release()
            self.elector = None
        scheduler, store, api = self.scheduler, self.store, self.api
        self.scheduler = self.store = self.api = None
        if scheduler is not None:
            await scheduler.close()
        if store is not None:
            await store.close()
        if api is not None:
            await api.close()
        if self.log_client is not None:
            await self.log_client.close()
        kube, self.kube_signals = self.kube_signals, None
        if kube is not None:
            await kube.close()


STARTUP_PATIENCE_S: Final = 60.0
"""How long start-up waits out a throttling or (re)initializing API server (429/5xx) before failing,
e.g. right after the CRDs were applied."""


async def _patiently(call: Callable[[], Awaitable[list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    delay, waited = 0.5, 0.0
    while True:
        try:
            return await call()
        except client.ApiException as exc:
            if not client.is_retryable(exc) or waited >= STARTUP_PATIENCE_S:
                raise
            logger.info("API not ready (%s); retrying in %.1f s", client.message_of(exc), delay)
        await asyncio.sleep(delay)
        waited += delay
        delay = min(delay * 2, 5.0)


def _items(listed: Any) -> list[dict[str, Any]]:
    """The objects of a custom-object list answer (a plain dict: the library has no model for CRs)."""
    items = listed.get("items") if isinstance(listed, dict) else None
    return [item for item in items or [] if isinstance(item, dict)]


def login(settings: kopf.OperatorSettings) -> Any:
    """The same credentials kopf uses: the kubeconfig ($KUBECONFIG) if any, else the pod's
    ServiceAccount. A ``kopf.ConnectionInfo``."""
    info = kopf.login_with_kubeconfig(settings=settings) or kopf.login_with_service_account(settings=settings)
    if info is None:
        raise kopf.LoginError("no credentials: set KUBECONFIG or run in a pod with a ServiceAccount token")
    return info


def _spawn(coro: Awaitable[None], name: str) -> asyncio.Task[None]:
    task: asyncio.Task[None] = asyncio.ensure_future(coro)
    task.set_name(name)
    task.add_done_callback(_log_failure)
    return task


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("task %s failed", task.get_name(), exc_info=task.exception())


def build_registry(shell: Shell) -> kopf.OperatorRegistry:
    """The handlers, registered on a registry of their own (no module-level decorators)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def _login(settings: kopf.OperatorSettings, **_: Any) -> Any:
        return login(settings)

    @kopf.on.probe(id="readiness", registry=registry)
    def _readiness(**_: Any) -> dict[str, Any]:
        # Shown by kopf's own liveness endpoint (--liveness); the probes use trainguard.http.
        return shell.health.readiness()[1]

    @kopf.on.probe(id="heartbeat", registry=registry)
    def _heartbeat(**_: Any) -> dict[str, Any]:
        alive, view = shell.health.liveness()
        if not alive:
            raise kopf.PermanentError(view["reason"])
        return view

    @kopf.on.cleanup(registry=registry)
    async def _cleanup(**_: Any) -> None:
        await shell.close()

    @kopf.on.event(GROUP, VERSION, "recoverypolicies", registry=registry)
    async def _policy(*, type: str, body: kopf.Body, **_: Any) -> None:
        # on.event: no finalizer and no progress annotations are ever written on the object.
        entry = policies.read(dict(body))
        if type == "DELETED":
            shell.book.remove(entry.key)
            logger.info("RecoveryPolicy %s/%s deleted", *entry.key)
        else:
            old = shell.book.entries.get(entry.key)
            shell.book.put(entry)
            if old is not None and old.generation == entry.generation and old.error == entry.error:
                return  # only our own status write came back
            if entry.error:
                logger.warning("RecoveryPolicy %s/%s is invalid: %s", *entry.key, entry.error)
            else:
                logger.info("RecoveryPolicy %s/%s generation %s accepted", *entry.key, entry.generation)
        shell.policies_changed()

    @kopf.on.event(GROUP, VERSION, "workloadrecoveries", registry=registry)
    async def _recovery(*, type: str, body: kopf.Body, **_: Any) -> None:
        shell.override_mode(dict(body), deleted=type == "DELETED")

    return registry


def configure(settings: kopf.OperatorSettings, config: OperatorConfig) -> None:
    """kopf settings of the operator."""
    # With a fixed list of namespaces there is nothing to scan for (no globs), and our handlers name
    # their resources exactly: no namespace listing, no CRD discovery needed.
    settings.scanning.disabled = not config.clusterwide
    settings.posting.enabled = False  # our own Events only (k8s/events.py), not kopf's log lines
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60


class StartupError(Exception):
    """A configuration or connection problem found before the operator starts; one line to report."""


async def run(config: OperatorConfig, *, stop_flag: asyncio.Event | None = None,
              ready_flag: asyncio.Event | None = None) -> None:
    """Run the operator until ``stop_flag`` is set or SIGINT/SIGTERM. Everything that can be wrong
    with the configuration (scheduler spec, database, catalog, credentials, CRDs not installed) is
    checked before kopf starts, and raised as StartupError."""
    settings = kopf.OperatorSettings()
    configure(settings, config)
    shell = Shell(config)
    server: http_app.Server | None = None
    ticking = asyncio.Event()
    ticker = asyncio.ensure_future(shell.health.tick_forever(ticking))
    try:
        try:
            # First, so that the probes answer (liveness) while start-up waits for the API server.
            reviewer = review.KubeReviewer(lambda: shell.api, config.workload_namespace)
            setup = http_api.mount(shell, shell.health, listen=config.http_listen, token_file=config.http_token_file,
                                   allow_action=config.allow_action, operator=True, reviewer=reviewer)
            server = await http_app.serve(shell.health, config.http_listen, setup=setup, routes=config.http_routes)
        except (ValueError, OSError) as exc:
            raise StartupError(f"cannot serve HTTP on {config.http_listen}: {exc}") from exc
        try:
            await shell.start(settings)
        except (kopf.LoginError, database.StoreError, catalog_mod.CatalogError, loader.PolicyError, ValueError,
                OSError, aiohttp.ClientError) as exc:
            raise StartupError(str(exc)) from exc
        except client.ApiException as exc:
            raise StartupError(f"cannot list RecoveryPolicy objects ({client.message_of(exc)}); are the CRDs in "
                               "crds/ applied and the RBAC in manifests/ bound to this identity?") from exc
        await kopf.operator(
            registry=build_registry(shell),
            settings=settings,
            standalone=True,  # kopf's peering is not what keeps one replica acting: the Lease is
            clusterwide=config.clusterwide,
            namespaces=list(config.namespaces),
            liveness_endpoint=config.liveness_endpoint,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        await shell.close()
        ticking.set()
        await asyncio.gather(ticker, return_exceptions=True)
        if server is not None:
            await server.stop()


def main(config: OperatorConfig) -> int:
    """Entry point of ``trainguard operator`` (``cli/operator.py`` parses the flags)."""
    try:
        asyncio.run(run(config))
    except StartupError as exc:
        print(f"trainguard operator: {exc}", file=sys.stderr)
        return 2
    return 0
