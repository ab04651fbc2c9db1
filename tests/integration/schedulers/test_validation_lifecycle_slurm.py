"""Validation before return on the real local Slurm cluster, through the undrain sweep: a node our executor's
rows drained is reserved, resumed inside our reservation and checked by the site's script (argv, submitted
with the real ``sbatch``); a passing check puts it back in service, a failing one drains it again with our
reason and holds it for repair with the check's exit code and output; either way our reservation is gone.
The passing round is carried on by a second Undrainer over the same store (a restart in the middle). Each
state is read back with ``trainguard nodes --format json`` and the lifecycle rows.

The drain is the executor's rows written directly around a real ``scontrol`` drain, as in
``test_node_lifecycle_slurm.py``; the clock of the time rule is a ManualClock, the check runs for real.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.integration.schedulers.test_node_lifecycle_slurm import HOUR, T0, nodes_json, our_drain
from tests.support import slurm
from trainguard.act import undrain, validate
from trainguard.model import actions, clock, lifecycle, vocab
from trainguard.schedulers import factory, slurm_local
from trainguard.store import audit, database

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

CHECK = """#!/bin/sh
# the site's check, as a test double of dcgmi diag: prints its verdict, exits with the code it is given
echo "check on $(hostname -s 2>/dev/null || echo node): $1"
exit "$2"
"""
ROUND_DEADLINE_S = 120.0
"""Real seconds a round may take on a busy 2-core machine (the check itself runs in well under a second)."""


async def _until_settled(sweeper: undrain.Undrainer, store: audit.AuditStore, node: str,
                         states: set[lifecycle.NodeState]) -> lifecycle.Transition:
    """Sweep until the node's lifecycle reaches one of ``states`` (polled, with a deadline)."""
    deadline = time.monotonic() + ROUND_DEADLINE_S
    while True:
        await sweeper.sweep()
        state = await store.node_state(node)
        if state is not None and state.state in states:
            return state
        assert time.monotonic() < deadline, f"{node} still {state.state if state else None} after the deadline"
        await asyncio.sleep(0.5)


async def _our_reservations(scheduler: slurm_local.SlurmCommandScheduler) -> list[str]:
    res = await scheduler.runner.run(["scontrol", "-o", "show", "reservation"])
    return [word.split("=", 1)[1] for line in res.stdout.splitlines() for word in line.split()
            if word.startswith("ReservationName=trainguard-validate-")]


async def test_a_check_returns_a_good_node_and_holds_a_bad_one(slurm_cluster: slurm.SlurmCluster, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = slurm_cluster.nodes[-1], slurm_cluster.nodes[-2]
    url = f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}"
    script = slurm_cluster.jobs_dir / "site-check.sh"
    script.write_text(CHECK)
    script.chmod(0o755)

    def rule(verdict: str, code: str) -> undrain.UndrainRule:
        check = validate.Check((str(script), verdict, code), timeout_s=600.0, output_dir=str(slurm_cluster.jobs_dir))
        return undrain.UndrainRule(after_s=HOUR, mode=vocab.Mode.ACTION, validation=check)

    rules = {"default": rule("pass", "0")}
    now = clock.ManualClock(T0)
    scheduler = factory.open_scheduler("slurm-local", env=slurm_cluster.client_env)
    assert isinstance(scheduler, slurm_local.SlurmCommandScheduler)
    store = await database.open_store(url)
    try:
        await our_drain(store, scheduler, good, 1)
        first = undrain.Undrainer(scheduler, store, now, rules.get, validator=scheduler)
        now.advance(HOUR + 10)
        # reserve, resume inside, submit: one sweep, unless Slurm refuses a step for now (a job of an earlier
        # test still ending on the node keeps it busy); a refused step stays an intent, tried at the next sweep
        deadline = time.monotonic() + ROUND_DEADLINE_S
        while not [r for r in await first.sweep() if r.step == f"validate_submit:{good}#1"]:
            assert time.monotonic() < deadline, await store.actions_for("slurm/test/lifecycle", 0, 1)
            await asyncio.sleep(0.5)
        assert await _our_reservations(scheduler) == [f"trainguard-validate-{good}"]
        assert (await nodes_json(url, capsys))[good] == "validating"

        # a restart: a new process (scheduler, store, undrainer) carries the round on
        again = factory.open_scheduler("slurm-local", env=slurm_cluster.client_env)
        store2 = await database.open_store(url)
        try:
            second = undrain.Undrainer(again, store2, now, rules.get, validator=again)
            state = await _until_settled(second, store2, good,
                                         {lifecycle.NodeState.IN_SERVICE, lifecycle.NodeState.HELD_FOR_REPAIR})
            assert state.event is lifecycle.NodeEvent.RESUMED
            steps = {r.step: r for r in await store2.actions_for("slurm/test/lifecycle", 0, 1)}
            assert [r.args["job_id"] for r in steps.values() if r.operation is actions.Operation.SUBMIT_CHECK] \
                == [steps[f"validate_verdict:{good}#1"].args["job_id"]]  # one check, not two
        finally:
            await again.close()
            await store2.close()
        assert good not in {n.name for n in await scheduler.list_nodes() if n.drained}
        assert await _our_reservations(scheduler) == []
        assert (await nodes_json(url, capsys))[good] == "in-service"
        events = [t.event.value for t in await store.node_transitions(good)]
        assert events[-3:] == ["validation-started", "validation-passed", "resumed"]

        rules["default"] = rule("fail", "3")
        await our_drain(store, scheduler, bad, 2)
        state = await _until_settled(first, store, bad,
                                     {lifecycle.NodeState.IN_SERVICE, lifecycle.NodeState.HELD_FOR_REPAIR})
        assert state.state is lifecycle.NodeState.HELD_FOR_REPAIR
        assert state.evidence["exit_code"] == 3 and ": fail" in state.evidence["output_tail"]
        snap = next(n for n in await scheduler.list_nodes() if n.name == bad)
        assert snap.drained and snap.reason.startswith("trainguard: failed validation (exit 3)")
        assert await _our_reservations(scheduler) == []
        assert (await nodes_json(url, capsys)) == {good: "in-service", bad: "held-for-repair"}
        now.advance(10 * HOUR)
        await first.sweep()
        assert (await nodes_json(url, capsys))[bad] == "held-for-repair"  # no rule of time returns it
    finally:
        for name in await _our_reservations(scheduler):
            slurm_cluster.scontrol("delete", f"ReservationName={name}")
        for snap in await scheduler.list_nodes():
            if snap.name in (good, bad) and snap.drained:
                slurm_cluster.scontrol("update", f"NodeName={snap.name}", "State=RESUME")
        await scheduler.close()
        await store.close()
