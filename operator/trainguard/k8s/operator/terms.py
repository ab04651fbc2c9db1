"""Acting terms: when this replica runs the engine, and the engine of each term.

Place: the operator shell (``shell.Shell.start`` calls ``Terms.start``). One instance acts:
standalone (one replica, Recreate strategy); with ``peering``, only the replica holding a
coordination.k8s.io Lease (``k8s/lease.py``), the others keep watching and take over when the Lease
expires; with ``shards`` > 1, every replica on the shards whose Leases it holds
(``k8s/shard_leases.py``). A term is one engine's life: it begins with a fresh engine (which first
resumes pending advice) and the loops that report it, and ends when the Lease is lost (in-flight
recoveries cancelled at once: another replica may act already) or the process stops (they finish).

With peering, each term first claims a fencing token in the audit store that every scheduler
mutation of the term carries (``lease.LeaseFence``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from typing import TYPE_CHECKING

from trainguard import shards as shards_mod
from trainguard.act import ports as act_ports
from trainguard.k8s import lease, shard_leases
from trainguard.k8s.operator import assembly
from trainguard.model import tasks

if TYPE_CHECKING:
    from trainguard.k8s.operator.shell import Shell

logger = logging.getLogger("trainguard.operator")


class Terms:
    """The current term of the shell (its tasks and stop flag) and, with peering, the Lease's elector."""

    def __init__(self, shell: Shell) -> None:
        self.shell = shell
        self.tasks: list[asyncio.Task[None]] = []
        """Tasks of the current term as the acting instance (engine, reconcile loop, reporter, status writer)."""
        self.stop = asyncio.Event()
        self.elector: lease.Elector | None = None

    async def start(self) -> None:
        """Act as configured: on this replica's shards, at once (standalone), or once the Lease is won."""
        shell, config = self.shell, self.shell.config
        assert shell.api is not None and shell.store is not None
        if config.shards > 1:
            if config.peering is not None:
                raise ValueError("--shards and --peering exclude each other: each shard has its own Lease")
            shard_spec = shards_mod.ShardSpec(
                config.shards, config.shard_key,
                config.replica_id or f"{os.environ.get('POD_NAME') or socket.gethostname()}-{os.getpid()}")
            shell.ownership = shards_mod.Ownership(shard_spec, shard_leases.KubeShardLeases(
                shell.api, config.workload_namespace, shell.store, shard_spec, shell.clock))
            await self.begin()
        elif config.peering is None:
            await self.begin()
        else:
            shell.health.standby = f"not holding the Lease {config.peering}"
            identity = f"{os.environ.get('POD_NAME') or socket.gethostname()}-{os.getpid()}"
            self.elector = lease.Elector(shell.api, config.workload_namespace, config.peering, identity,
                                         clock=shell.clock)
            shell.tasks.append(tasks.spawn(self.lead_forever(), "leader-election"))

    async def begin(self) -> None:
        """Start acting: a fresh engine (which first resumes pending advice) and the reconcile loop.

        With peering, the term first claims leadership in the audit store; every scheduler mutation
        of the term is fenced with that token (``k8s/lease.py``)."""
        shell = self.shell
        assert shell.scheduler is not None and shell.store is not None and shell.catalog is not None
        fence: act_ports.Fence = act_ports.ALWAYS_LEADER
        if self.elector is not None:
            token = await shell.store.claim_leadership(self.elector.name, self.elector.identity, at=shell.clock.now())
            logger.info("leadership claimed in the audit store: %s", token.describe())
            fence = lease.LeaseFence(self.elector, token)
        self.stop = asyncio.Event()
        shell.engine = engine = assembly.new_engine(shell, fence)
        shell.health.standby = None
        for workload, mode in shell.recoveries.overrides.items():
            engine.set_mode_override(workload, mode)
        for workload, values in shell.recoveries.policy_overrides.items():
            engine.set_workload_overrides(workload, dict(values))
        self.tasks = [
            tasks.spawn(engine.run(self.stop), "engine"),
            tasks.spawn(shell.recoveries.reconcile_forever(self.stop), "workloadrecovery-reconcile"),
            tasks.spawn(shell.reporting.report_forever(self.stop), "workloadrecovery-report"),
            tasks.spawn(shell.recoveries.coalescer.run(self.stop, shell.recoveries.write_status),
                        "workloadrecovery-status"),
        ]

    async def end(self, *, abort: bool = False) -> None:
        """Stop acting: the engine stops discovery and waits for in-flight recoveries, or, with
        ``abort`` (the Lease is lost: another replica may act already), cancels them at once."""
        shell = self.shell
        if abort and shell.engine is not None:
            shell.engine.abort()
        self.stop.set()
        shell.wake.set()
        running, self.tasks = self.tasks, []
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        shell.engine = None
        if shell.config.peering is not None:
            shell.health.standby = f"not holding the Lease {shell.config.peering}"

    async def lead_forever(self) -> None:
        """Act only while holding the Lease (``k8s/lease.py``)."""
        assert self.elector is not None
        shell = self.shell
        while not shell.stop.is_set():
            leading = await self.elector.step()
            if leading and shell.engine is None:
                logger.info("leading: starting the engine")
                try:
                    await self.begin()
                except Exception as exc:  # the store is unreachable: no claim, no token to act with
                    logger.error("cannot claim leadership in the audit store (retrying at the next renewal): "
                                 "%s: %s", type(exc).__name__, exc)
            elif not leading and shell.engine is not None:
                logger.warning("lost the lease: stopping the engine and its in-flight recoveries now")
                await self.end(abort=True)
                logger.warning("lost the lease: engine stopped")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(shell.stop.wait(), timeout=self.elector.timing.renew_interval_s)

    async def release(self) -> None:
        """Give up the Lease (at shutdown), so another replica need not wait for it to expire."""
        if self.elector is not None:
            await self.elector.release()
            self.elector = None
