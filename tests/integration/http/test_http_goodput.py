"""``GET /api/v1/goodput`` on a real socket over a real audit database (SQLite and PostgreSQL): the
same figures as ``trainguard goodput``, the failures by cause for the console's plot, answers valid
against the OpenAPI document, bad input a 400 with a message."""

from __future__ import annotations

import aiohttp

from tests.integration.http import test_http_api as api_tests
from tests.integration.store import test_goodput as history


async def test_goodput_answers_the_accounting_of_the_audit_history(db_url: str) -> None:
    from trainguard.store import database

    store = await database.open_store(db_url)
    try:
        await history.write_history(store)
        server = await api_tests.serve(store)
        try:
            async with aiohttp.ClientSession() as session:
                c = api_tests.Client(session, server.url)
                status, body, _ = await c.get("/api/v1/goodput", manual_delay="600")
                assert status == 200, body
                api_tests.check("GoodputReport", body)
                rows = {row["workload"]: row for row in body["items"]}
                assert {w: r["lost_seconds"] for w, r in rows.items()} == {
                    history.CRASH: 180, history.STALL: 560, history.SLOW: 0, history.HANG: 201}
                assert rows[history.CRASH]["baseline_lost_seconds"] == 100 + 10 + 600 + 60
                assert body["manual_delay_seconds"] == 600 and body["job_timeout_seconds"] == 600
                failures = body["failures"]
                assert [(f["workload"], f["lost_seconds"]) for f in failures] == [
                    (history.HANG, 201), (history.STALL, 560), (history.CRASH, 180)]  # by onset
                assert failures[2]["onset"] == "2027-01-15T08:06:40.000000+00:00"  # T0 + 400

                status, body, _ = await c.get("/api/v1/goodput", by="category")
                groups = {row["group"]: row for row in api_tests.check("GoodputReport", body)["items"]}
                assert groups["progress_stalled"]["workload"] == "*"
                assert groups["progress_stalled"]["lost_seconds"] == 761

                status, text, _ = await c.get("/metrics")
                assert status == 200
                samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                           if line.startswith(("trainguard_time_lost", "trainguard_productive", "trainguard_failures"))}
                assert {cause: samples[f'trainguard_time_lost_seconds_total{{cause="{cause}"}}'] for cause in (
                    "work_lost", "detection", "decision", "action", "requeue_wait")} == {
                    "work_lost": 100 + 200 + 50, "detection": 10 + 90 + 90, "decision": 5 + 1 + 0,
                    "action": 5 + 0 + 1, "requeue_wait": 60 + 269 + 60}
                assert samples["trainguard_productive_seconds_total"] == 300 + 1000 + 0 + 100 + 50 + 100  # ended
                assert [samples[f'trainguard_failures_total{{estimate="{basis}"}}']
                        for basis in ("job_exit", "job_timeout", "none")] == [1, 1, 1]

                for params, words in (({"by": "colour"}, "by must be one of"), ({"since": "soon"}, "ISO 8601"),
                                      ({"manual_delay": "-1"}, "seconds >= 0"), ({"x": "1"}, "unknown query")):
                    status, body, _ = await c.get("/api/v1/goodput", **params)
                    assert status == 400 and words in api_tests.check("Error", body)["error"], (params, body)
        finally:
            await server.stop()
    finally:
        await store.close()
