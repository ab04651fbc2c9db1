"""``POST /api/v1/nodes/{node}/undo-drain`` on the real local Slurm cluster: our own drain is
resumed at once (and recorded with who asked); a node a person drained is left alone even when our
store remembers draining it earlier; a node we never drained is refused."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.integration.http.test_http_api import POLICIES, WRITE, Client, serve
from tests.support import slurm
from trainguard import engine as engine_mod
from trainguard import settings as settings_mod
from trainguard.detect import catalog as catalog_mod
from trainguard.http import auth
from trainguard.model import actions, advice, clock, vocab
from trainguard.policy import loader
from trainguard.schedulers import factory
from trainguard.store import audit, database

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

W = "slurm/test/undo"
T0 = 1_800_000_000.0


async def record_our_drain(store: audit.AuditStore, node: str, generation: int) -> None:
    item = advice.Advice.model_validate({
        "workload": W, "attempt": 0, "generation": generation, "action": "requeue", "exclude_nodes": [node],
        "reasons": [f"hardware verdict on {node}"], "mode": "Action", "deadline": T0 + 300, "policy": "default"})
    assert await store.record_advice(item, at=T0)
    step = f"drain_node:{node}"
    await store.begin_action(actions.ActionRecord(workload=W, attempt=0, generation=generation, step=step,
                                                  operation=actions.Operation.DRAIN_NODE, args={"node": node}),
                             at=T0 + 1)
    await store.finish_action(workload=W, attempt=0, generation=generation, step=step,
                              status=actions.ActionStatus.DONE, at=T0 + 2)


async def test_undo_resumes_only_our_own_drain(slurm_cluster: slurm.SlurmCluster, tmp_path: Path) -> None:
    ours, foreign = slurm_cluster.nodes[-1], slurm_cluster.nodes[-2]
    store = await database.open_store(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    scheduler = factory.open_scheduler("slurm-local", env=slurm_cluster.client_env)
    engine = engine_mod.Engine(scheduler, store, loader.parse_text(POLICIES),
                               catalog_mod.load_catalog(), clock_=clock.SystemClock(),
                               settings=settings_mod.EngineSettings(allow_action=True))
    server = await serve(store, tmp_path=tmp_path, engine=engine, allow_action=True)
    try:
        await scheduler.drain_node(ours, "xid 79 (test)")
        await record_our_drain(store, ours, 1)
        slurm_cluster.scontrol("update", f"NodeName={foreign}", "State=DRAIN", "Reason=admin maintenance")
        await record_our_drain(store, foreign, 2)  # we drained it once; a person has drained it since
        async with aiohttp.ClientSession() as session:
            c = Client(session, server.url)
            status, body, _ = await c.get("/api/v1/nodes", token=WRITE, since="2020-01-01T00:00:00Z")
            undoable = {n["node"]: [a["undoable"] for a in n["actions"]] for n in body["items"]}
            assert undoable == {ours: [True], foreign: [True]}

            status, body = await c.post(f"/api/v1/nodes/{foreign}/undo-drain", None, token=WRITE)
            assert status == 409 and "no longer ours" in body["error"], body
            status, body = await c.post("/api/v1/nodes/node-never-drained/undo-drain", None, token=WRITE)
            assert status == 409 and "did not drain" in body["error"], body
            status, body = await c.post(f"/api/v1/nodes/{ours}/undo-drain", None, token=WRITE)
            assert status == 200, body
            status, body = await c.post(f"/api/v1/nodes/{ours}/undo-drain", None, token=WRITE)
            assert status == 409 and "already settled" in body["error"], body
        nodes = {n.name: n for n in await scheduler.list_nodes()}
        assert not nodes[ours].drained
        assert nodes[foreign].drained and nodes[foreign].reason == "admin maintenance"
        resume = [r for r in await store.actions_for(W, 0, 1) if r.operation is actions.Operation.RESUME_NODE]
        assert [(r.status, r.args["requested_by"]) for r in resume] == [
            (actions.ActionStatus.DONE, auth.user_of(WRITE))]
        audit_rows = [r for r in await store.audit_records(workload=W, kind=vocab.AuditKind.ACTION)
                      if r.payload.get("operation") == "undo_drain"]
        assert [r.payload["arguments"] for r in audit_rows] == [{"node": ours}]
    finally:
        await server.stop()
        drained = {n.name for n in await scheduler.list_nodes() if n.drained}
        for name in sorted({ours, foreign} & drained):
            slurm_cluster.scontrol("update", f"NodeName={name}", "State=RESUME")
        await scheduler.close()
        await store.close()
