"""``trainguard operator``'s entry: start the HTTP server and the shell, then run kopf until stopped.

Place: called by ``cli/operator.py`` with an ``OperatorConfig``. Everything that can be wrong with
the configuration (scheduler spec, database, catalog, credentials, CRDs not installed) is found
before kopf starts and reported as one ``StartupError`` line.
"""

from __future__ import annotations

import asyncio
import sys

import aiohttp
import kopf

from trainguard.detect import catalog as catalog_mod
from trainguard.http import api as http_api
from trainguard.http import app as http_app
from trainguard.k8s import client, review
from trainguard.k8s.operator.config import OperatorConfig
from trainguard.k8s.operator.handlers import build_registry, configure
from trainguard.k8s.operator.shell import Shell
from trainguard.policy import loader
from trainguard.store import database


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
                                   allow_action=config.engine.allow_action, operator=True, reviewer=reviewer)
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
