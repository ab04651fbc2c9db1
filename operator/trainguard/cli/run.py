"""`trainguard run`: the standalone runner beside a plain Slurm cluster.

A thin shell: it reads the settings (flags, environment, config file: ``cli/config.py``), opens the
scheduler adapter, the audit store and the policies, serves /healthz, /readyz and /metrics
(``trainguard.http``) and hands everything to ``trainguard.engine.Engine``, built by
``trainguard.engine.assemble`` as the operator builds its engines. Stops cleanly on SIGINT/SIGTERM.
``--once`` ends with exit code 1 and one line when the scheduler or the store cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainguard import settings as settings_mod
from trainguard.cli import common, config, settings_io

if TYPE_CHECKING:
    from trainguard import shards
    from trainguard.detect import catalog as catalog_mod
    from trainguard.model import clock
    from trainguard.policy import loader
    from trainguard.schedulers import base
    from trainguard.signals import gpu_metrics, loki, loki_book, sources, victorialogs
    from trainguard.store import audit

logger = logging.getLogger("trainguard.run")


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "run",
        help="run the recovery loop standalone against a Slurm cluster",
        description="Watch opted-in Slurm jobs (#SBATCH --comment=trainguard ...), detect failures, and "
        "record (Monitor) or carry out (Action) the recovery advice. Every recommendation is written to the "
        "audit log before anything is done. Action needs two keys: --mode action (or TRAINGUARD_MODE=action) "
        "and a policy whose mode is Action; the built-in default policy is always Monitor. Every setting is a "
        "flag, an environment variable TRAINGUARD_<NAME> or a key of the --config file, in that precedence.",
    )
    settings_io.add_arguments(parser, config.RunSettings)
    parser.add_argument("--once", action="store_true",
                        help="run one recovery + discovery + tailing round and exit (non-zero when the scheduler "
                        "or the store cannot be reached)")
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective configuration (secrets redacted) as JSON and exit")
    parser.set_defaults(func=run)


def load_policies(paths: list[Path]) -> loader.PolicySet:
    """The policies from ``paths``, or the built-in default policy, which is always Monitor: Action
    needs two keys, the cluster-wide switch (``--mode action``) and a policy someone wrote with
    ``mode: Action``; the switch alone never makes the built-in policy act."""
    from trainguard.policy import loader
    from trainguard.policy import model as policy_model

    if paths:
        return loader.load_files(paths)
    default = policy_model.RecoveryPolicy(metadata=policy_model.Metadata(name=loader.DEFAULT_NAME),
                                          spec=policy_model.RecoveryPolicySpec())
    return loader.PolicySet((default,))


def run(args: argparse.Namespace) -> int:
    # The engine's modules are imported here, not at the top, so that other sub-commands start fast.
    from trainguard.detect import catalog as catalog_mod
    from trainguard.policy import loader

    cfg = settings_io.start(args, config.RunSettings, "trainguard run")
    if isinstance(cfg, int):
        return cfg
    try:
        policies = load_policies(cfg.policy)
        catalog = catalog_mod.load_catalog(extra_files=cfg.patterns_file)
    except (loader.PolicyError, catalog_mod.CatalogError, OSError) as exc:
        print(f"trainguard run: {exc}", file=sys.stderr)
        return 2
    settings = common.engine_settings(cfg)
    try:
        return asyncio.run(_main(cfg, args.once, policies, catalog, settings))
    except _Fatal as exc:
        print(f"trainguard run: {exc}", file=sys.stderr)
        return 2
    except _Unreachable as exc:
        print(f"trainguard run: {exc}", file=sys.stderr)
        return 1


def gpu_metrics_config(cfg: config.Settings) -> gpu_metrics.GpuMetricsConfig | None:
    """The DCGM evidence source's settings (``--prometheus-url`` and friends), checked; None when no
    URL is set. Raises ValueError naming the bad setting."""
    from trainguard.signals import gpu_metrics

    if not cfg.prometheus_url:
        return None
    result = gpu_metrics.GpuMetricsConfig(url=cfg.prometheus_url.rstrip("/"),
                                          hostname_label=cfg.prometheus_hostname_label,
                                          node_regex=cfg.prometheus_node_regex, wait_s=cfg.prometheus_wait)
    try:
        gpu_metrics.GpuMetrics(result)
    except re.error as exc:
        raise ValueError(f"--prometheus-node-regex: {exc}") from exc
    except ValueError as exc:
        raise ValueError(f"--prometheus-hostname-label: {exc}") from exc
    return result


def checked_gpu_metrics(cfg: config.Settings) -> gpu_metrics.GpuMetricsConfig | None:
    """The DCGM evidence source's settings of ``--prometheus-url``, checked (``_Fatal`` names a bad one);
    None when it is not configured."""
    try:
        return gpu_metrics_config(cfg)
    except ValueError as exc:
        raise _Fatal(str(exc)) from exc


def store_shards(cfg: config.Settings, store: audit.AuditStore, clock_: clock.Clock) -> shards.Ownership | None:
    """``--shards N`` (N > 1): this replica's share of the workloads, leases in the audit database."""
    if cfg.shards <= 1:
        return None
    from trainguard import shards as shards_mod

    spec = shards_mod.ShardSpec(cfg.shards, cfg.shard_key, cfg.replica_id or shards_mod.default_replica_id())
    if store.sql_engine.dialect.name == "sqlite":
        logger.warning("--shards %d with SQLite: every replica must share this one file (one host); use PostgreSQL "
                       "for replicas on several hosts", cfg.shards)
    logger.info("sharding by %s into %d shards as replica %s", spec.key, spec.count, spec.replica)
    return shards_mod.Ownership(spec, shards_mod.StoreLeases(store, spec, clock_))


class _Fatal(Exception):
    """A start-up problem to report in one line."""


class _Unreachable(Exception):
    """``--once``: the scheduler or the store did not answer; one line, exit code 1."""


async def _main(
    cfg: config.RunSettings, once: bool, policies: loader.PolicySet, catalog: catalog_mod.Catalog,
    settings: settings_mod.EngineSettings,
) -> int:
    from trainguard import health as health_mod
    from trainguard.console import web as console_web
    from trainguard.engine import assemble
    from trainguard.http import api as http_api
    from trainguard.http import app as http_app
    from trainguard.model import clock
    from trainguard.observe import notify
    from trainguard.schedulers import factory
    from trainguard.store import database

    db_url = cfg.database_url()
    env = cfg.scheduler_env()
    log_books, log_client = log_source(cfg)  # before anything is opened: a bad secret file is one line
    metrics = checked_gpu_metrics(cfg)  # a bad setting stops us before anything is opened
    assert cfg.scheduler is not None
    spec = cfg.scheduler

    async def open_scheduler() -> base.Scheduler:
        try:
            fallback = None
            if spec.startswith("slurm-rest:") and cfg.rest_fallback != "none":
                fallback = factory.open_scheduler(cfg.rest_fallback, env=env)
            return factory.open_scheduler(
                spec, env=env, jwt=cfg.slurm_token_source(), fallback=fallback,
                client_keys=[str(k) for k in cfg.ssh_key] or None,
                known_hosts=str(cfg.known_hosts) if cfg.known_hosts else None,
            )
        except (ValueError, OSError) as exc:
            raise _Fatal(str(exc)) from exc

    health = health_mod.Health()
    try:
        parts = await assemble.assemble(
            settings, scheduler=open_scheduler, db_url=db_url, catalog=catalog,
            policy_version=",".join(policies.names()), clock_=clock.SystemClock(), health=health,
            log_books=log_books, log_client=log_client, gpu_metrics_=metrics,
            shards=lambda store: store_shards(cfg, store, clock.SystemClock()))
    except database.StoreError as exc:
        raise _Fatal(str(exc)) from exc
    store = parts.store
    notifier = notify.attach(store, cfg.notify_config, health.metrics.registry)  # docs/notifications.md
    engine = parts.engine(policies)
    stop = asyncio.Event()
    server = None
    ticker = None
    try:
        if not once:
            try:
                setup = http_api.mount(http_api.Fixed(store=store, engine=engine), health, listen=cfg.http_listen,
                                       token_file=cfg.http_token_file, allow_action=settings.allow_action,
                                       operator=False)
                server = await http_app.serve(health, cfg.http_listen, setup=setup, routes=console_web.routes())
            except (ValueError, OSError) as exc:
                raise _Fatal(f"cannot serve HTTP on {cfg.http_listen}: {exc}") from exc
            ticker = asyncio.ensure_future(health.tick_forever(stop))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        modes = ", ".join(f"{p.name}: {p.spec.mode.value}" for p in policies.policies)
        logger.info("trainguard run: scheduler %s, audit %s, action switch %s, policies {%s}, catalog %s "
                    "(%d patterns), http %s", cfg.scheduler, database.safe_url(db_url),
                    "ON" if settings.allow_action else "off", modes, catalog.version, len(catalog.patterns),
                    server.url if server is not None else "off")
        if once:
            try:
                if engine.shards is not None:
                    await engine.shards.leases.step()
                await engine.recover()
                await engine.discover()
                await engine.tail()
            except Exception as exc:
                dependency = health_mod.classify(exc)
                if dependency is None:
                    raise
                raise _Unreachable(f"{dependency} unreachable: {health_mod.one_line(exc)}") from exc
        else:
            await engine.run(stop)
    finally:
        stop.set()
        if ticker is not None:
            await asyncio.gather(ticker, return_exceptions=True)
        if server is not None:
            await server.stop()
        if notifier is not None:
            await notifier.close()  # what is pending is sent before the store closes
        await parts.close()
    return 0


def log_source(cfg: config.Settings) -> tuple[sources.BookFactory, victorialogs.Client | loki.LokiClient | None]:
    """Where job output is read from: VictoriaLogs when ``victorialogs_url`` is set, Loki when
    ``loki_url`` is (not both), else the files."""
    from trainguard.signals import loki_book, sources, victorialogs

    try:
        found_loki = loki_config(cfg)
    except config.ConfigError as exc:
        raise _Fatal(str(exc)) from exc
    if found_loki is not None:
        return loki_book.books(found_loki)
    found = victorialogs_config(cfg)
    if found is None:
        return sources.file_books, None
    return victorialogs.books(found)


def victorialogs_config(cfg: config.Settings) -> victorialogs.Config | None:
    """The VictoriaLogs source's settings, or None when ``victorialogs_url`` is not set (files)."""
    from trainguard.signals import victorialogs

    if not cfg.victorialogs_url:
        return None
    logger.info("job output is read from VictoriaLogs at %s (fields: job %s, file %s, host %s)",
                cfg.victorialogs_url, cfg.victorialogs_job_field, cfg.victorialogs_path_field,
                cfg.victorialogs_host_field)
    return victorialogs.Config(url=cfg.victorialogs_url, job_field=cfg.victorialogs_job_field,
                               path_field=cfg.victorialogs_path_field, host_field=cfg.victorialogs_host_field,
                               rank_field=cfg.victorialogs_rank_field)


def loki_config(cfg: config.Settings) -> loki_book.Config | None:
    """The Loki source's settings, or None when ``loki_url`` is not set. Its secrets are read from
    their files now (``config.ConfigError``: the start stops with one line)."""
    from trainguard.signals import loki, loki_book

    if not cfg.loki_url:
        return None
    token, password = cfg.loki_secrets()
    labels = loki.LokiLabels(job=cfg.loki_job_label, rank=cfg.loki_rank_label, host=cfg.loki_host_label)
    auth = loki.LokiAuth(tenant=cfg.loki_tenant, bearer_token=token, username=cfg.loki_username, password=password)
    logger.info("job output is read from Loki at %s (labels: job %s, file %s, host %s, rank %s%s)", cfg.loki_url,
                cfg.loki_job_label, cfg.loki_path_label, cfg.loki_host_label, cfg.loki_rank_label,
                f", tenant {cfg.loki_tenant}" if cfg.loki_tenant else "")
    return loki_book.Config(url=cfg.loki_url, selector=cfg.loki_selector, labels=labels,
                            path_label=cfg.loki_path_label, auth=auth)
