"""Reads the facts the scorecard judges: Monitor-mode advice and attempts from the audit store, jobs and
nodes from the scheduler (``observe/scorecard.py`` scores them).

The scheduler is optional: without one (no ``--scheduler``), only what the store recorded is used and
more advice ends ``unknown``. A scheduler that does not answer for one job (purged after Slurm's
``MinJobAge``) is the same as no scheduler for that job: the store's last state stands in.
"""

from __future__ import annotations

import logging

from trainguard.model import vocab, workloads
from trainguard.observe import scorecard
from trainguard.schedulers import base
from trainguard.store import audit, queries, snapshots

logger = logging.getLogger(__name__)


async def gather(
    store: audit.AuditStore, scheduler: base.Scheduler | None, *, policy: str | None = None,
    workload: str | None = None, gpus_per_node: int = scorecard.DEFAULT_GPUS_PER_NODE,
) -> list[scorecard.Scored]:
    """Every Monitor-mode advice (of ``policy`` / ``workload`` when given), scored, oldest first."""
    records = await store.audit_records(workload=workload, kind=vocab.AuditKind.ADVICE)
    monitor = [r for r in records if r.payload.get("mode") == vocab.Mode.MONITOR.value
               and r.attempt is not None and (policy is None or r.payload.get("policy", "") == policy)]
    if not monitor:
        return []
    reads = queries.ReadQueries(store.sql_engine)
    nodes: dict[str, workloads.NodeSnapshot] = {}
    if scheduler is not None:
        try:
            nodes = {n.name: n for n in await scheduler.list_nodes()}
        except base.SchedulerError as exc:
            logger.warning("scorecard: the scheduler's nodes are unreadable (%s); drains are not seen", exc)
    seen = await snapshots.Snapshots(store.sql_engine).of(sorted({r.workload for r in monitor}))
    facts: dict[str, tuple[list[scorecard.AttemptFact], workloads.JobSnapshot | None, str]] = {}
    rows: list[scorecard.Scored] = []
    for record in monitor:
        name = record.workload
        if name not in facts:
            facts[name] = await _workload_facts(store, reads, scheduler, name)
        attempts, job, stored_state = facts[name]
        advised = next((a for a in attempts if a.attempt == record.attempt), None)
        payload = record.payload
        advice = scorecard.AdviceFact(
            workload=name, attempt=int(record.attempt or 0), generation=int(payload.get("generation") or 1),
            action=str(payload.get("action", "")), policy=str(payload.get("policy", "")),
            at=audit.to_epoch(record.time),
            exclusions=tuple(str(n) for n in payload.get("exclude_nodes") or ()),
            drains=tuple(str(n) for n in payload.get("drain_nodes") or ()),
            suspects=advised.suspects if advised is not None else (),
            category=advised.category if advised is not None else "",
        )
        rows.append(scorecard.score_advice(advice, attempts, job, nodes, stored_state=stored_state,
                                           snapshots=seen.get(name, ()), gpus_per_node=gpus_per_node))
    return rows


async def _workload_facts(
    store: audit.AuditStore, reads: queries.ReadQueries, scheduler: base.Scheduler | None, name: str,
) -> tuple[list[scorecard.AttemptFact], workloads.JobSnapshot | None, str]:
    verdicts = await store.audit_records(workload=name, kind=vocab.AuditKind.VERDICT)
    suspects: dict[int, tuple[str, ...]] = {}
    categories: dict[int, str] = {}
    for verdict in verdicts:  # oldest first: the latest verdict of an attempt wins
        if verdict.attempt is not None:
            named = [*(verdict.payload.get("nodes") or ()), *(verdict.payload.get("lemon_nodes") or ())]
            suspects[verdict.attempt] = tuple(dict.fromkeys(str(n) for n in named))
            categories[verdict.attempt] = str(verdict.payload.get("category") or "")
    stored = await reads.attempts(name)
    attempts = [scorecard.AttemptFact(
        attempt=a.attempt, state=a.state, nodes=tuple(a.nodes),
        started_at=None if a.started_at is None else a.started_at.timestamp(),
        ended_at=None if a.ended_at is None else a.ended_at.timestamp(),
        suspects=suspects.get(a.attempt, ()), category=categories.get(a.attempt, ""),
    ) for a in stored]
    known = {a.attempt for a in attempts}
    attempts += [scorecard.AttemptFact(attempt=n, suspects=s, category=categories.get(n, ""))
                 for n, s in suspects.items() if n not in known]
    workload = await store.get_workload(name)
    job: workloads.JobSnapshot | None = None
    if scheduler is not None and workload is not None and workload.job_id:
        try:
            job = await scheduler.get_job(workload.job_id)
        except base.SchedulerError as exc:  # JobGone included: the store's state stands in
            logger.info("scorecard: job %s not readable from the scheduler (%s)", workload.job_id, exc)
    return attempts, job, workload.state if workload is not None else ""
