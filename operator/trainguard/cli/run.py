"""`trainguard run`: the standalone runner beside a plain Slurm cluster.

A thin shell: it parses flags, opens the scheduler adapter, the audit store and the policies,
and hands them to ``trainguard.engine.Engine``. Stops cleanly on SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainguard import settings as settings_mod
from trainguard.store import location

if TYPE_CHECKING:
    from trainguard.detect import catalog as catalog_mod
    from trainguard.policy import loader

logger = logging.getLogger("trainguard.run")


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "run",
        help="run the recovery loop standalone against a Slurm cluster",
        description="Watch opted-in Slurm jobs (#SBATCH --comment=trainguard ...), detect failures, and "
        "record (Monitor) or carry out (Action) the recovery advice. Every recommendation is written to the "
        "audit log before anything is done.",
    )
    parser.add_argument(
        "--scheduler", required=True, metavar="SPEC",
        help="slurm-local | slurm-ssh://USER@HOST[:PORT] | slurm-rest://HOST:PORT",
    )
    parser.add_argument(
        "--mode", choices=["monitor", "action"], default="monitor",
        help="cluster-wide switch (default: monitor). 'monitor' records advice and changes nothing. 'action' "
        "carries out advice for policies whose mode is Action; without --policy, the built-in default policy "
        "takes this mode.",
    )
    parser.add_argument("--policy", type=Path, action="append", default=[], metavar="FILE",
                        help="RecoveryPolicy YAML file (repeatable; one or many documents each)")
    parser.add_argument("--db", default=location.DEFAULT_DB_URL, metavar="URL",
                        help=f"audit database URL (default: {location.DEFAULT_DB_URL})")
    parser.add_argument("--patterns-file", type=Path, action="append", default=[], metavar="FILE",
                        help="extra catalog patterns (YAML, catalog schema); repeatable")
    parser.add_argument("--jwt", default=None, help="slurmrestd token (default: $SLURM_JWT)")
    parser.add_argument("--rest-fallback", default="slurm-local", metavar="SPEC",
                        help="CLI transport for what slurmrestd cannot do, e.g. requeue (default: slurm-local; "
                        "'none' to disable)")
    parser.add_argument("--ssh-key", action="append", default=None, metavar="FILE", help="SSH private key")
    parser.add_argument("--known-hosts", default=None, metavar="FILE", help="SSH known_hosts file")
    parser.add_argument("--poll", type=float, default=settings_mod.EngineSettings.discovery_interval_s,
                        metavar="SECONDS", help="seconds between job listings (default: %(default)s)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="log verbosity on stderr (default: INFO)")
    parser.add_argument("--once", action="store_true", help="run one discovery + tailing round and exit")
    parser.set_defaults(func=run)


def load_policies(paths: list[Path], mode: str) -> loader.PolicySet:
    """The policies from ``paths``, or the built-in default policy in ``mode``."""
    from trainguard.model import vocab
    from trainguard.policy import loader
    from trainguard.policy import model as policy_model

    if paths:
        return loader.load_files(paths)
    spec = policy_model.RecoveryPolicySpec(mode=vocab.Mode.ACTION if mode == "action" else vocab.Mode.MONITOR)
    default = policy_model.RecoveryPolicy(metadata=policy_model.Metadata(name=loader.DEFAULT_NAME), spec=spec)
    return loader.PolicySet((default,))


def run(args: argparse.Namespace) -> int:
    # The engine's modules are imported here, not at the top, so that other sub-commands start fast.
    from trainguard.detect import catalog as catalog_mod
    from trainguard.policy import loader

    logging.basicConfig(
        level=getattr(logging, args.log_level), stream=sys.stderr,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
    )
    if args.poll <= 0:
        print("trainguard run: --poll must be > 0", file=sys.stderr)
        return 2
    try:
        policies = load_policies(args.policy, args.mode)
        catalog = catalog_mod.load_catalog(extra_files=args.patterns_file)
    except (loader.PolicyError, catalog_mod.CatalogError, OSError) as exc:
        print(f"trainguard run: {exc}", file=sys.stderr)
        return 2
    settings = settings_mod.EngineSettings(discovery_interval_s=args.poll, allow_action=args.mode == "action")
    try:
        return asyncio.run(_main(args, policies, catalog, settings))
    except _Fatal as exc:
        print(f"trainguard run: {exc}", file=sys.stderr)
        return 2


class _Fatal(Exception):
    """A start-up problem to report in one line."""


async def _main(
    args: argparse.Namespace, policies: loader.PolicySet, catalog: catalog_mod.Catalog,
    settings: settings_mod.EngineSettings,
) -> int:
    from trainguard import engine as engine_mod
    from trainguard.model import clock
    from trainguard.schedulers import factory
    from trainguard.store import audit, database

    try:
        fallback = None
        if args.scheduler.startswith("slurm-rest:") and args.rest_fallback != "none":
            fallback = factory.open_scheduler(args.rest_fallback, env=dict(os.environ))
        scheduler = factory.open_scheduler(
            args.scheduler, env=dict(os.environ), jwt=args.jwt, fallback=fallback, client_keys=args.ssh_key,
            known_hosts=args.known_hosts,
        )
    except (ValueError, OSError) as exc:
        raise _Fatal(str(exc)) from exc
    context = audit.AuditContext(
        policy_version=",".join(policies.names()),
        catalog_version=catalog.version,
        settings_fingerprint=settings.fingerprint(),
    )
    try:
        store = await database.open_store(args.db, context=context)
    except database.StoreError as exc:
        await scheduler.close()
        raise _Fatal(str(exc)) from exc
    engine = engine_mod.Engine(
        scheduler, store, policies, catalog, clock_=clock.SystemClock(), settings=settings
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    modes = ", ".join(f"{p.name}: {p.spec.mode.value}" for p in policies.policies)
    logger.info("trainguard run: scheduler %s, audit %s, action switch %s, policies {%s}, catalog %s (%d patterns)",
                args.scheduler, database.safe_url(args.db), "ON" if settings.allow_action else "off", modes,
                catalog.version, len(catalog.patterns))
    try:
        if args.once:
            await engine.recover()
            await engine.discover()
            await engine.tail()
        else:
            await engine.run(stop)
    finally:
        await scheduler.close()
        await store.close()
    return 0
