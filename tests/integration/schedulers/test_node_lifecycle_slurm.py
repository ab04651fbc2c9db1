"""The node lifecycle on the real local Slurm cluster: our drain takes a node out of service, the undrain
sweep's real ``scontrol`` resume puts it back; a node a person holds stays drained whatever the time,
until a person returns it; a node an administrator drained shows as ``other`` and is never touched; and
``trainguard nodes --format json`` shows each state."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.support import slurm
from trainguard.act import undrain
from trainguard.cli import main as cli
from trainguard.model import actions, advice, clock, lifecycle, vocab
from trainguard.schedulers import base, factory
from trainguard.store import audit, database

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

W = "slurm/test/lifecycle"
T0 = 1_800_000_000.0
HOUR = 3600.0


async def our_drain(store: audit.AuditStore, scheduler: base.Scheduler, node: str, generation: int) -> None:
    """A drain of ours as the executor leaves it: advice, intent, the real drain, done, the generation closed."""
    item = advice.Advice.model_validate({
        "workload": W, "attempt": 0, "generation": generation, "action": "stop", "drain_nodes": [node],
        "reasons": [f"hardware verdict on {node}"], "mode": "Action", "deadline": T0 + 300, "policy": "default"})
    assert await store.record_advice(item, at=T0)
    step = f"drain_node:{node}"
    await store.begin_action(actions.ActionRecord(workload=W, attempt=0, generation=generation, step=step,
                                                  operation=actions.Operation.DRAIN_NODE, args={"node": node}),
                             at=T0 + 1)
    await scheduler.drain_node(node, "trainguard: suspect node, drained by recovery (test)")
    await store.finish_action(workload=W, attempt=0, generation=generation, step=step,
                              status=actions.ActionStatus.DONE, at=T0 + 2)
    await store.record_outcome(actions.OutcomeRecord(workload=W, attempt=0, generation=generation,
                                                     disposition=vocab.Disposition.CONVERGED, at=T0 + 3))


async def nodes_json(url: str, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """``trainguard nodes --format json`` (its own event loop, on a thread), node -> state."""
    assert await asyncio.to_thread(cli.main, ["nodes", "--db", url, "--format", "json"]) == 0
    return {row["node"]: row["state"] for row in map(json.loads, capsys.readouterr().out.splitlines())}


async def drained_nodes(scheduler: base.Scheduler) -> set[str]:
    return {n.name for n in await scheduler.list_nodes() if n.drained}


async def test_the_lifecycle_follows_real_drains_and_resumes(slurm_cluster: slurm.SlurmCluster, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    returned, held, foreign = slurm_cluster.nodes[-1], slurm_cluster.nodes[-2], slurm_cluster.nodes[-3]
    url = f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}"
    scheduler = factory.open_scheduler("slurm-local", env=slurm_cluster.client_env)
    store = await database.open_store(url)
    now = clock.ManualClock(T0)
    sweeper = undrain.Undrainer(scheduler, store, now,
                                {"default": undrain.UndrainRule(after_s=HOUR, mode=vocab.Mode.ACTION)}.get)
    try:
        await our_drain(store, scheduler, returned, 1)
        await our_drain(store, scheduler, held, 2)
        await store.decide_node(held, lifecycle.NodeEvent.HELD, by="alice", channel="cli", at=T0 + 4,
                                reason="ECC errors, ticket 5")
        slurm_cluster.scontrol("update", f"NodeName={foreign}", "State=DRAIN", "Reason=admin maintenance")
        await sweeper.sweep()  # before undrainAfter: nothing returns; the admin's drain is seen
        assert await nodes_json(url, capsys) == {
            returned: "out-of-service", held: "held-for-repair", foreign: "other"}

        now.advance(HOUR + 10)
        await sweeper.sweep()
        drained = await drained_nodes(scheduler)
        assert returned not in drained and {held, foreign} <= drained  # only ours, and not the held one
        assert await nodes_json(url, capsys) == {returned: "in-service", held: "held-for-repair", foreign: "other"}

        assert await asyncio.to_thread(cli.main, ["nodes", "return", held, "--db", url, "--reason", "DIMM replaced",
                                                  "--by", "bob"]) == 0
        capsys.readouterr()
        await sweeper.sweep()
        drained = await drained_nodes(scheduler)
        assert held not in drained and foreign in drained
        assert await nodes_json(url, capsys) == {returned: "in-service", held: "in-service", foreign: "other"}

        slurm_cluster.scontrol("update", f"NodeName={foreign}", "State=RESUME")  # the admin's own return
        await sweeper.sweep()
        assert (await nodes_json(url, capsys))[foreign] == "in-service"
    finally:
        for name in sorted({returned, held, foreign} & await drained_nodes(scheduler)):
            slurm_cluster.scontrol("update", f"NodeName={name}", "State=RESUME")
        await scheduler.close()
        await store.close()
