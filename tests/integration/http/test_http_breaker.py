"""``POST /api/v1/actions/breaker/reset``: a person closes the latched blast-radius breaker over HTTP.

Against the real API server on a real store (SQLite, PostgreSQL, MariaDB): the breaker is opened the
way the engine opens it (an administrator's cap refusing a decision in ``reserve_limits``), every
step then sees it (``ActionSwitch.blocked``); the read role may not reset it, the write role may,
and the reset is audited with who did it and why.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import aiohttp
import pytest

from tests.integration.http.test_http_api import READ, WRITE, Client, serve
from trainguard.act import switch
from trainguard.model import actions, advice, limits, vocab
from trainguard.store import audit, ledger

T0 = 1_800_000_000.5
W = "slurm/test/8"


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def refuse(rows: Sequence[actions.ActionRecord], live: Sequence[ledger.Reservation]) -> ledger.Decision:
    check = limits.LimitCheck(limit=limits.CAP_ACTIONS_PER_HOUR, maximum=0, planned=1, in_window=0, would_block=True,
                              cap=True, reason="0 + 1 > cluster cap max-actions-per-hour 0")
    return ledger.Decision(limits.LimitReport(checks=[check]), [], [])


async def test_the_write_role_resets_the_breaker_and_the_reset_is_audited(
    store: audit.AuditStore, session: aiohttp.ClientSession, tmp_path: Path,
) -> None:
    await store.upsert_workload(workload=W, scheduler="slurm", job_id="8", at=T0)
    await store.record_advice(advice.Advice.model_validate(
        {"workload": W, "attempt": 0, "generation": 1, "action": "requeue", "mode": "Action", "policy": "default"}),
        at=T0)
    report = await store.reserve_limits(W, 0, 1, refuse, at=T0 + 1, since=T0 - 3600, breaker=switch.BREAKER)
    assert report.breaker_reason is not None
    keys = switch.ActionSwitch(True, store)
    assert "breaker is open" in str(await keys.blocked())

    server = await serve(store, tmp_path=tmp_path, allow_action=True)
    c = Client(session, server.url)
    try:
        status, body = await c.post("/api/v1/actions/breaker/reset", {"reason": "checked"}, token=READ)
        assert status == 403, body
        assert await keys.blocked() is not None
        status, body = await c.post("/api/v1/actions/breaker/reset", {}, token=WRITE)
        assert status == 400, body  # the reason is required
        status, body = await c.post("/api/v1/actions/breaker/reset", {"reason": "the rack is fixed"}, token=WRITE)
        assert status == 200 and body["ok"] is True and "breaker reset" in body["message"], body
    finally:
        await server.stop()

    assert await keys.blocked() is None
    resets = [r for r in await store.audit_records(kind=vocab.AuditKind.ACTION)
              if r.payload.get("operation") == "breaker-reset"]
    assert len(resets) == 1 and resets[0].decided_by == "api"
    assert resets[0].payload["reason"] == "the rack is fixed" and resets[0].payload["was_open"] is True
    assert resets[0].payload["by"]
