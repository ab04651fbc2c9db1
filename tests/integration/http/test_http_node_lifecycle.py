"""``/api/v1/nodes`` and the node lifecycle (SQLite, PostgreSQL, MySQL/MariaDB): the list carries each
node's state, ``/nodes/{node}`` its history with evidence, and a person's hold and return (write role)
are recorded with the token's user; a refused decision is a 409 that writes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.integration.http.test_http_api import READ, WRITE, Client, check, seed, serve
from trainguard.http import auth
from trainguard.model import actions, advice
from trainguard.store import audit

pytestmark = [pytest.mark.integration]

T0 = 1_800_000_000.0


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def our_drain(store: audit.AuditStore, workload: str, node: str) -> None:
    """A drain row of ours, done (the store's own path: the lifecycle moves with it)."""
    item = advice.Advice.model_validate({
        "workload": workload, "attempt": 1, "generation": 1, "action": "stop", "drain_nodes": [node],
        "reasons": [f"hardware verdict on {node}"], "mode": "Action", "deadline": T0 + 300, "policy": "default"})
    assert await store.record_advice(item, at=T0 + 50)
    step = f"drain_node:{node}"
    await store.begin_action(actions.ActionRecord(workload=workload, attempt=1, generation=1, step=step,
                                                  operation=actions.Operation.DRAIN_NODE, args={"node": node}),
                             at=T0 + 51)
    await store.finish_action(workload=workload, attempt=1, generation=1, step=step,
                              status=actions.ActionStatus.DONE, at=T0 + 52)


async def test_the_api_shows_the_lifecycle_and_records_a_persons_hold_and_return(
        store: audit.AuditStore, session: aiohttp.ClientSession, tmp_path: Path) -> None:
    await seed(store, 4)  # workloads 0 and 3 fail on node2 (hardware verdicts): node2 suspect
    await our_drain(store, "slurm/c1/3", "node3")
    server = await serve(store, tmp_path=tmp_path)
    c = Client(session, server.url)
    try:
        status, body, _ = await c.get("/api/v1/nodes", token=READ, since="2020-01-01T00:00:00Z")
        assert status == 200, body
        states = {n["node"]: n["state"] for n in check("NodeList", body)["items"]}
        assert states == {"node2": "suspect", "node3": "out-of-service"}

        status, body = await c.post("/api/v1/nodes/node3/hold", {"reason": "ECC, ticket 4"}, token=READ)
        assert status == 403, body  # a decision needs the write role
        status, body = await c.post("/api/v1/nodes/node3/hold", {"reason": "ECC, ticket 4"}, token=WRITE)
        assert status == 200 and "held-for-repair" in body["message"], body
        status, body = await c.post("/api/v1/nodes/node1/hold", {"reason": "x"}, token=WRITE)
        assert status == 409 and "refused, nothing changed" in body["error"], body
        status, body = await c.post("/api/v1/nodes/node3/return", {"reason": "DIMM replaced"}, token=WRITE)
        assert status == 200 and "next sweep" in body["message"], body

        status, body, _ = await c.get("/api/v1/nodes/node3", token=READ)
        detail = check("NodeDetail", body)
        assert [(h["event"], h["state"], h["by"]) for h in detail["history"]] == [
            ("taken-out", "out-of-service", "trainguard"),
            ("held", "held-for-repair", auth.user_of(WRITE)),
            ("cleared", "out-of-service", auth.user_of(WRITE))]
        assert detail["history"][0]["evidence"] == {"step": "drain_node:node3"}
        status, body, _ = await c.get("/api/v1/nodes/node2", token=READ)
        assert check("NodeDetail", body)["state"] == "suspect" and len(body["incidents"]) == 2
        status, body, _ = await c.get("/api/v1/nodes/node1", token=READ)
        assert status == 404, body
        assert await store.node_state("node1") is None
    finally:
        await server.stop()
