"""``Shell``: the running operator's state, shared by its handlers and the collaborators that act on it.

Place: the middle of the operator shell. ``entry.run`` builds one ``Shell`` per process and hands it
to the kopf handlers (``handlers.py``); what the shell does is split by responsibility:

- ``terms.Terms``: when this replica acts (standalone, sharded, or while holding the Lease) and the
  engine of each term;
- ``recoveries.Recoveries``: the WorkloadRecovery objects (overrides read from them, their creation,
  status writes through the coalescer, garbage collection) and the reconcile loop;
- ``reporting.Reporting``: engine records turned into Events, and the RecoveryPolicy statuses;
- ``assembly``: what the engine is built from (scheduler, audit store, catalog, log sources).

The shell itself keeps what all of them read (the API client, the engine, the store, the accepted
policies) and opens and closes it: ``start`` and ``close``.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import kopf
from kubernetes_asyncio import client as k8s

from trainguard import engine as engine_mod
from trainguard import health as health_mod
from trainguard import shards as shards_mod
from trainguard.detect import catalog as catalog_mod
from trainguard.k8s import client, policies
from trainguard.k8s import kube_signals as kube_signals_mod
from trainguard.k8s.operator import assembly, handlers
from trainguard.k8s.operator import recoveries as recoveries_mod
from trainguard.k8s.operator import reporting as reporting_mod
from trainguard.k8s.operator import terms as terms_mod
from trainguard.k8s.operator.config import GROUP, POLICIES, VERSION, OperatorConfig
from trainguard.model import clock, times
from trainguard.observe.notify import service as notify_service
from trainguard.schedulers import base
from trainguard.signals import loki, sources, victorialogs
from trainguard.store import audit, database

logger = logging.getLogger("trainguard.operator")

STARTUP_PATIENCE_S: Final = 60.0
"""How long start-up waits out a throttling or (re)initializing API server (429/5xx) before failing,
e.g. right after the CRDs were applied."""


@dataclass
class Shell:
    """The running operator's state, captured by the handlers (no module globals)."""

    config: OperatorConfig
    api: client.ApiClient | None = None
    """kubernetes_asyncio client with kopf's credentials (``k8s/client.py``); None until started."""
    engine: engine_mod.Engine | None = None
    """The engine of the current term; None while this replica does not act."""
    scheduler: base.Scheduler | None = None
    store: audit.AuditStore | None = None
    catalog: catalog_mod.Catalog | None = None
    log_client: victorialogs.Client | loki.LokiClient | None = None
    notifier: notify_service.Notifier | None = None
    """Sends the notifications of ``--notify-config`` from the store's committed records."""
    log_books: sources.BookFactory = sources.file_books
    """Where the engine reads job output from (set once at start from ``config.victorialogs`` or ``config.loki``)."""
    kube_signals: kube_signals_mod.KubeSignals | None = None
    """Pod logs and Node conditions of Kubernetes workloads (``--scheduler kubernetes``; ``k8s/kube_signals.py``)."""
    book: policies.PolicyBook = field(default_factory=policies.PolicyBook)
    ownership: shards_mod.Ownership | None = None
    """With ``config.shards`` > 1: the shards this replica holds (Kubernetes Leases)."""
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    """Set to run the reconcile loop at once (a policy changed, a record came)."""
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    """Tasks of the whole run (leader election)."""
    clock: clock.Clock = field(default_factory=clock.SystemClock)
    health: health_mod.Health = field(default_factory=health_mod.Health)
    """Liveness (heartbeat) and readiness (scheduler, store) of this replica (``trainguard.health``)."""
    terms: terms_mod.Terms = field(init=False)
    recoveries: recoveries_mod.Recoveries = field(init=False)
    reporting: reporting_mod.Reporting = field(init=False)

    def __post_init__(self) -> None:
        self.terms = terms_mod.Terms(self)
        self.recoveries = recoveries_mod.Recoveries(self)
        self.reporting = reporting_mod.Reporting(self)

    def now(self) -> datetime.datetime:
        return times.to_datetime(self.clock.now())

    def policies_changed(self) -> None:
        """Rebuild the PolicySet from the accepted objects and hand it to the engine."""
        if self.engine is not None:
            self.engine.update_policies(self.book.policy_set())
        self.wake.set()

    async def start(self, settings: kopf.OperatorSettings) -> None:
        """Open the scheduler, store and API client, load the policies, start acting."""
        config = self.config
        self.api = client.from_connection_info(handlers.login(settings))
        await assembly.open_parts(self)
        self.book.home = config.workload_namespace  # its policies win name clashes (k8s/policies.py)
        # Policies before the first term, so a job failing in the first seconds is already covered.
        for namespace in config.namespaces or (None,):
            for body in await _patiently(functools.partial(self._list_policies, namespace)):
                self.book.put(policies.read(body))
        await self.terms.start()
        logger.info("trainguard operator: scheduler %s, audit %s, action switch %s, policies %s, recoveries in %s, %s",
                    config.scheduler, database.safe_url(config.db_url), "ON" if config.engine.allow_action else "off",
                    self.book.policy_set().names(), config.workload_namespace,
                    f"lease {config.peering}" if config.peering else "standalone")

    async def _list_policies(self, namespace: str | None) -> list[dict[str, Any]]:
        assert self.api is not None
        objects = k8s.CustomObjectsApi(self.api)
        if namespace is None:
            return recoveries_mod.items_of(await objects.list_cluster_custom_object(GROUP, VERSION, POLICIES))
        return recoveries_mod.items_of(await objects.list_namespaced_custom_object(GROUP, VERSION, namespace, POLICIES))

    async def close(self) -> None:
        """Stop the engine (in-flight recoveries finish), give up the Lease, close everything;
        safe to call twice."""
        self.stop.set()
        self.wake.set()
        tasks, self.tasks = self.tasks, []
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self.terms.end()
        await self.terms.release()
        notifier, self.notifier = self.notifier, None
        if notifier is not None:
            await notifier.close()  # what is pending is sent before the store closes
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
