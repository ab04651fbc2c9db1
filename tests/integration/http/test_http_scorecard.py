"""``GET /api/v1/scorecard`` on SQLite and PostgreSQL: the scored Monitor-mode advice and each policy's
summary, validated against the served OpenAPI document."""

from __future__ import annotations

import aiohttp

from tests.integration.http.test_http_api import Client, check, serve
from trainguard.model import advice, vocab
from trainguard.store import audit

T0 = 1_800_000_000.0


async def test_scorecard_endpoint_scores_monitor_advice_from_the_store(store: audit.AuditStore) -> None:
    for job, mode in (("1", vocab.Mode.MONITOR), ("2", vocab.Mode.ACTION)):
        workload = f"slurm/{job}"
        await store.upsert_workload(workload=workload, scheduler="slurm-local", job_id=job, at=T0, policy="p",
                                    state="FAILED")
        await store.record_attempt(workload=workload, attempt=0, at=T0, started_at=T0, ended_at=T0 + 60,
                                   state="FAILED", nodes=["node1", "node2"])
        await store.record_advice(advice.Advice(workload=workload, attempt=0, generation=1,
                                                action=vocab.AdviceAction.REQUEUE, exclude_nodes=["node2"],
                                                mode=mode, policy="p"), at=T0 + 61)
    server = await serve(store)  # no engine: no scheduler to read, the store's records only
    try:
        async with aiohttp.ClientSession() as session:
            c = Client(session, server.url)
            status, body, _ = await c.get("/api/v1/scorecard")
            assert status == 200, body
            card = check("Scorecard", body)
            status, other, _ = await c.get("/api/v1/scorecard", policy="other")
            assert (status, other["items"], other["summaries"]) == (200, [], [])
            status, bad, _ = await c.get("/api/v1/scorecard", nope="1")
            assert status == 400, bad
    finally:
        await server.stop()
    # only the Monitor-mode advice is scored: nobody requeued the failed job
    [row] = card["items"]
    assert (row["workload"], row["advice"], row["score"], row["detail"]) == (
        "slurm/1", "requeue", "would-have-helped", "ignored-job-stayed-down")
    [summary] = card["summaries"]
    assert (summary["policy"], summary["summary"], summary["scored"], summary["ready_for_action"]) == ("p", True, 1,
                                                                                                      False)
