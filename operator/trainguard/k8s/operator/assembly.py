"""What the operator's engine is built from: the operator's side of assembling the engine.

Place: the operator shell. ``open_parts`` opens, once per process, what every term's engine uses
(catalog, scheduler adapters, audit store, log sources, Kubernetes signals) and
sets each on the shell as soon as it is open, so ``Shell.close`` closes whatever start-up opened
before a failure. ``new_engine`` builds one term's engine from them (``terms.Terms.begin``).

Both shells build their engine through ``engine/assemble.py`` (the store's opening with its context,
the ``Engine`` itself); what the operator adds is its own: the ``kubernetes`` scheduler spec,
Slinky's cordons, Kubernetes signals, one engine per leadership term with the term's fence, and the
shell as the engine's listener.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from trainguard import engine as engine_mod
from trainguard.act import ports as act_ports
from trainguard.detect import catalog as catalog_mod
from trainguard.engine import assemble as engine_assemble
from trainguard.k8s import kube_signals as kube_signals_mod
from trainguard.k8s import slinky_nodes
from trainguard.k8s.kubejobs import scheduler as kube_scheduler
from trainguard.k8s.kubejobs import wiring as kube_wiring
from trainguard.observe import notify
from trainguard.schedulers import base, composite, factory
from trainguard.signals import loki_book, victorialogs

if TYPE_CHECKING:
    from trainguard.k8s.operator.shell import Shell


async def open_parts(shell: Shell) -> None:
    """Open the catalog, the scheduler adapters, the audit store and the log sources onto ``shell``."""
    config = shell.config
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
                                                           node_pool_label=config.node_pool_label,
                                                           check_namespace=config.workload_namespace))
        elif config.slinky_namespace:
            # Slurm on Slinky: its nodes are taken out of service by a cordon, through the executor
            assert shell.api is not None
            opened.append(slinky_nodes.SlinkyScheduler(
                factory.open_scheduler(spec, env=env, jwt=config.jwt, fallback=fallback), shell.api,
                config.slinky_namespace))
        else:
            opened.append(factory.open_scheduler(spec, env=env, jwt=config.jwt, fallback=fallback))
    shell.scheduler = opened[0] if len(opened) == 1 else composite.CompositeScheduler(opened)
    shell.store = await engine_assemble.open_store(config.engine, db_url=config.db_url, catalog=catalog,
                                                   policy_version="kubernetes")
    shell.notifier = notify.attach(shell.store, config.notify_config, shell.health.metrics.registry)
    shell.catalog = catalog
    if config.victorialogs is not None and shell.log_client is None:
        shell.log_books, shell.log_client = victorialogs.books(config.victorialogs)
    if config.loki is not None and shell.log_client is None:
        shell.log_books, shell.log_client = loki_book.books(config.loki)
    if "kubernetes" in {p.strip() for p in config.scheduler.split(",")} and shell.kube_signals is None:
        kube = next((s for s in opened if isinstance(s, kube_scheduler.KubeScheduler)), None)
        shell.kube_signals = await kube_signals_mod.open_signals(
            ended=(lambda t: kube.ended_pods(t.namespace, t.kind, t.name)) if kube is not None else None,
            retired=(lambda t: kube.retired_pods(t.namespace, t.kind, t.name)) if kube is not None else None)
        shell.log_books = kube_signals_mod.routed(shell.kube_signals.log_books, shell.log_books)


def new_engine(shell: Shell, fence: act_ports.Fence) -> engine_mod.Engine:
    """One term's engine over the parts ``open_parts`` opened, its records reported by the shell: built
    by the engine's one assembly (``engine.assemble.Assembly.engine``), as ``trainguard run``'s is."""
    assert shell.scheduler is not None and shell.store is not None and shell.catalog is not None
    parts = engine_assemble.Assembly(
        settings=shell.config.engine, scheduler=shell.scheduler, store=shell.store, catalog=shell.catalog,
        clock=shell.clock, health=shell.health, log_books=shell.log_books, gpu_metrics=shell.config.gpu_metrics,
        node_sources=shell.kube_signals.node_sources if shell.kube_signals is not None else (),
        shards=shell.ownership)
    return parts.engine(shell.book.policy_set(), listeners=[shell.reporting.on_record], fence=fence)
