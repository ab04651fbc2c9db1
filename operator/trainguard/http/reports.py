"""``/api/v1/goodput``, ``/api/v1/scorecard``, ``/api/v1/backtest``: the reports computed from the
audit store and the signal journal, the same as ``trainguard goodput``, ``scorecard`` and ``backtest``.

Each is computed per request (the goodput accounting and the replay off the event loop, in a thread); a
backtest is bounded in time (``BACKTEST_SECONDS``) and in rows. All three need only the read role
(the backtest is a POST for its body, and changes nothing).

Place: a route module of ``http.api`` (which mounts it).
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Mapping
from typing import Final

from aiohttp import web

from trainguard.http import models
from trainguard.http.common import STATE, ApiError, answer, iso, query, read_body, time_of
from trainguard.model import times
from trainguard.observe import goodput
from trainguard.store import goodput as goodput_facts

_GOODPUT_FAILURES: Final = 2000
"""Failures listed in one goodput answer (the most recent): enough for the console's plot."""


def _seconds_param(params: Mapping[str, str], key: str, default: float) -> float:
    text = params.get(key)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ApiError(400, f"{key} must be a number of seconds, got {text[:60]!r}") from None
    if not value >= 0 or value == float("inf"):
        raise ApiError(400, f"{key} must be a finite number of seconds >= 0, got {text[:60]!r}")
    return value


async def goodput_report(request: web.Request) -> web.Response:
    """``trainguard goodput`` over HTTP: rows per group plus the recent failures by cause."""
    state = request.app[STATE]
    params = query(request, ("since", "by", "job_timeout", "manual_delay"))
    by = params.get("by", "workload")
    if by not in goodput.GROUPINGS:
        raise ApiError(400, f"by must be one of {', '.join(goodput.GROUPINGS)}, got {by[:60]!r}")
    assume = goodput.Assumptions(
        job_timeout_s=_seconds_param(params, "job_timeout", goodput.DEFAULT_JOB_TIMEOUT_S),
        manual_delay_s=_seconds_param(params, "manual_delay", goodput.DEFAULT_MANUAL_DELAY_S))
    facts = await goodput_facts.attempt_facts(state.store().sql_engine, since=time_of(params, "since"))
    accounts = await asyncio.to_thread(goodput.account, facts, now=time.time(), assume=assume)  # off the loop
    items = []
    for row in await asyncio.to_thread(goodput.rows, accounts, by=by):
        group = str(row[by] if by == "workload" else row.pop(by))
        items.append(models.GoodputRow(group=group, **row))
    failures = sorted((a.failure for a in accounts if a.failure is not None), key=lambda f: f.onset_at)
    shown = []
    for f in failures[-_GOODPUT_FAILURES:]:
        fields = goodput.failure_json(f)
        fields["onset"] = iso(fields.pop("onset_at"))
        shown.append(models.GoodputFailure.model_validate(fields))
    return answer(models.GoodputReport(by=by, items=items, failures=shown, job_timeout_seconds=assume.job_timeout_s,
                                      manual_delay_seconds=assume.manual_delay_s))


async def get_scorecard(request: web.Request) -> web.Response:
    """The Monitor-mode scorecard (docs/scorecard.md) with the default readiness rule; the engine's
    scheduler is read when this process runs one, else only the store's records count."""
    from trainguard.observe import scorecard, scorecard_facts

    state = request.app[STATE]
    params = query(request, ("policy", "workload"))
    engine = state.backend.engine
    rows = await scorecard_facts.gather(state.store(), engine.scheduler if engine is not None else None,
                                        policy=params.get("policy"), workload=params.get("workload"))
    return answer(models.Scorecard(
        items=[models.ScorecardRow.model_validate(row.to_json()) for row in rows],
        summaries=[models.ScorecardSummary.model_validate(s) for s in scorecard.summarise(rows, scorecard.Readiness())],
    ))


BACKTEST_SECONDS: Final = 30.0
"""The run-time bound of one backtest request (about 10,000 decisions take ~10 s on 2 busy cores)."""
BACKTEST_ROWS: Final = 1000
"""At most this many rows in one answer (the summary always covers every decision)."""


async def run_backtest(request: web.Request) -> web.Response:
    """Replay the signal journal's decisions under the posted policy (read role: nothing changes)."""
    from trainguard.journal import backtest
    from trainguard.policy import loader
    from trainguard.store import journal as journal_store

    state = request.app[STATE]
    query(request, ())
    body: models.BacktestRequest = await read_body(request, models.BacktestRequest)
    try:
        policies = loader.parse_text(body.policy, "the posted policy")
    except loader.PolicyError as exc:
        raise ApiError(400, str(exc)) from None
    journal = journal_store.JournalStore(state.store().sql_engine, retention_s=0, max_bytes=0)
    decisions = await backtest.load(journal, workload=body.workload, since=_epoch(body.since), until=_epoch(body.until))
    deadline = time.monotonic() + BACKTEST_SECONDS
    try:
        rows, summary = await asyncio.to_thread(backtest.run, decisions, policies, every=body.all, deadline=deadline)
    except backtest.TooLong as exc:
        raise ApiError(400, f"the backtest took longer than {BACKTEST_SECONDS:.0f} s ({exc}): narrow it with "
                            "since, until or workload, or run `trainguard backtest`") from None
    return answer(models.BacktestResult(rows=[models.BacktestRow.model_validate(r) for r in rows[:BACKTEST_ROWS]],
                                       truncated=len(rows) > BACKTEST_ROWS,
                                       summary=models.BacktestSummary.model_validate(summary)))


def _epoch(when: datetime.datetime | None) -> float | None:
    """An ISO time of a request body as epoch seconds (no offset means UTC, as everywhere in the API)."""
    if when is None:
        return None
    return times.to_epoch(times.as_utc(when))


ROUTES = (
    ("GET", "/goodput", goodput_report),
    ("POST", "/backtest", run_backtest),
    ("GET", "/scorecard", get_scorecard),
)
