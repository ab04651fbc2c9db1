"""``POST /api/v1/backtest`` on the real HTTP stack and the real store (SQLite, PostgreSQL, MariaDB): the read
role may call it (it changes nothing), the answer matches the OpenAPI document, a bad policy is a 400."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.integration.http.test_http_api import READ, Client, check, serve
from tests.support import journal_replay
from trainguard.journal import entries
from trainguard.policy import loader
from trainguard.store import audit
from trainguard.store import journal as journal_store

NO_RETRIES = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: train}
spec: {mode: Action, retries: {maxRetries: 0}}
"""


async def test_a_reader_backtests_a_changed_policy_over_the_journal(store: audit.AuditStore, tmp_path: Path) -> None:
    journal = journal_store.JournalStore(store.sql_engine, retention_s=1e9, max_bytes=10**9)
    base = loader.parse_text(journal_replay.BASE)
    for index in range(1, 5):  # attempts 1, 2, 0, 1: requeued under maxRetries 3
        entry = journal_replay.synthetic_entry(index, base)
        await journal.append(workload=entry.advice.workload, attempt=entry.advice.attempt, kind=entries.ADVICE,
                             at=entry.at, payload=entry.model_dump(mode="json"))
    server = await serve(store, tmp_path=tmp_path)
    try:
        async with aiohttp.ClientSession() as session:
            c = Client(session, server.url)
            status, body = await c.post("/api/v1/backtest", {"policy": NO_RETRIES}, token=READ)
            assert status == 200, body
            check("BacktestResult", body)
            assert body["summary"]["decisions"] == 4 and body["truncated"] is False
            assert {(r["recorded"], r["replayed"]) for r in body["rows"]} == {("requeue", "stop")}
            assert body["summary"]["removed_requeues"] == len(body["rows"]) >= 1

            status, body = await c.post("/api/v1/backtest", {"policy": journal_replay.BASE, "all": True,
                                                             "workload": "slurm/bench/2"}, token=READ)
            assert status == 200 and [r["differs"] for r in body["rows"]] == [False]

            status, body = await c.post("/api/v1/backtest", {"policy": "kind: RecoveryPolicy\nspec: 3"}, token=READ)
            assert status == 400 and body["error"]
            status, body = await c.post("/api/v1/backtest", {"policy": NO_RETRIES}, token=READ, csrf=False)
            assert status == 403 and "CSRF" in body["error"]
    finally:
        await server.stop()
