"""Assembly: the engine and everything it runs on, built from the shell's settings in one place.

Place: the top of the engine package, called by both shells: ``cli.run`` (one engine for the
process) and ``k8s.operator`` (one engine per leadership term, over the same scheduler and store).
A shell reads its own settings (flags, environment, config file, Kubernetes objects) and knows its
own adapters; what the engine needs from them is assembled here, the same way for both: the
scheduler opened, the audit store opened with the context every row carries, the log source, the
GPU metrics, the shards, and then the ``Engine`` with all of it. ``Assembly.close`` closes what
was opened, in the reverse order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from trainguard import health as health_mod
from trainguard import settings as settings_mod
from trainguard import shards as shards_mod
from trainguard.act import ports as act_ports
from trainguard.detect import catalog as catalog_mod
from trainguard.engine import core, runtime
from trainguard.model import clock
from trainguard.policy import loader
from trainguard.schedulers import base
from trainguard.signals import gpu_metrics, sources
from trainguard.store import audit, database


class Closing(Protocol):
    """A client the assembly closes at the end (a log store's)."""

    async def close(self) -> None: ...


SchedulerOpener = Callable[[], Awaitable[base.Scheduler]]
"""Opens the shell's scheduler adapter(s): only the shell knows which (Slurm, Kubernetes, several)."""

ShardsOf = Callable[[audit.AuditStore], shards_mod.Ownership | None]
"""This replica's shards, given the opened store (their leases live in it, or in Kubernetes Leases)."""


@dataclass
class Assembly:
    """What an engine runs on, opened once per process; ``engine`` builds an engine over it."""

    settings: settings_mod.EngineSettings
    scheduler: base.Scheduler
    store: audit.AuditStore
    catalog: catalog_mod.Catalog
    clock: clock.Clock
    health: health_mod.Health
    log_books: sources.BookFactory = sources.file_books
    log_client: Closing | None = None
    gpu_metrics: gpu_metrics.GpuMetricsConfig | None = None
    """DCGM evidence (``--prometheus-url``): each engine gets its own client of it."""
    node_sources: Sequence[sources.NodeSource] = ()
    shards: shards_mod.Ownership | None = None
    closers: list[Closing] = field(default_factory=list)
    """Further clients of the shell's to close with the rest (e.g. Kubernetes pod logs)."""

    def engine(self, policies: loader.PolicySet, *, listeners: Sequence[runtime.Listener] = (),
               fence: act_ports.Fence = act_ports.ALWAYS_LEADER) -> core.Engine:
        """A new engine over these parts: once for ``trainguard run``, once per leadership term for the
        operator (``fence``: the term's token; ``listeners``: the shell's status and Events)."""
        return core.Engine(
            self.scheduler, self.store, policies, self.catalog, clock_=self.clock, settings=self.settings,
            listeners=listeners, health=self.health, fence=fence, log_books=self.log_books,
            gpu_metrics_=gpu_metrics.GpuMetrics(self.gpu_metrics) if self.gpu_metrics is not None else None,
            node_sources=self.node_sources, shards=self.shards,
        )

    async def close(self) -> None:
        """Close the scheduler, the store and the clients (safe to call once per assembly)."""
        await self.scheduler.close()
        await self.store.close()
        for client in ([self.log_client] if self.log_client is not None else []) + self.closers:
            await client.close()


async def open_store(settings: settings_mod.EngineSettings, *, db_url: str, catalog: catalog_mod.Catalog,
                     policy_version: str) -> audit.AuditStore:
    """The audit store, opened (and migrated) with the context every row it writes carries: the
    policies' version, the catalog's and the settings' fingerprint. Raises ``database.StoreError``."""
    context = audit.AuditContext(policy_version=policy_version, catalog_version=catalog.version,
                                 settings_fingerprint=settings.fingerprint())
    return await database.open_store(db_url, context=context)


async def assemble(
    settings: settings_mod.EngineSettings, *, scheduler: SchedulerOpener, db_url: str,
    catalog: catalog_mod.Catalog, policy_version: str, clock_: clock.Clock, health: health_mod.Health,
    log_books: sources.BookFactory = sources.file_books, log_client: Closing | None = None,
    gpu_metrics_: gpu_metrics.GpuMetricsConfig | None = None, node_sources: Sequence[sources.NodeSource] = (),
    shards: ShardsOf | None = None,
) -> Assembly:
    """Open the scheduler, then the audit store (every row carries ``policy_version``, the catalog's
    version and the settings' fingerprint), then this replica's shards; the parts of an engine.

    Errors are the openers' own (the shell reports them in one line: ``database.StoreError`` for the
    store); what was opened before the failure is closed first."""
    opened = await scheduler()
    try:
        store = await open_store(settings, db_url=db_url, catalog=catalog, policy_version=policy_version)
    except BaseException:
        await opened.close()
        raise
    return Assembly(settings=settings, scheduler=opened, store=store, catalog=catalog, clock=clock_, health=health,
                    log_books=log_books, log_client=log_client, gpu_metrics=gpu_metrics_, node_sources=node_sources,
                    shards=shards(store) if shards is not None else None)
