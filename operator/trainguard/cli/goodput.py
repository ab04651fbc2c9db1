"""`trainguard goodput`: productive time and time lost to failures, from the audit database.

A shell over ``store.goodput`` (the facts) and ``observe.goodput`` (the accounting, whose
docstring and docs/goodput.md define every figure). Read-only: the database is never created or
changed. ``--format json`` is a contract checked from outside: one JSON object per line, each with
at least ``workload`` and ``lost_seconds``; with ``--by`` other than ``workload`` the row's
``workload`` is ``*`` and ``workloads`` lists the group's workloads.
Exit codes: 0 printed (possibly nothing), 2 bad arguments or the database is missing or unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from trainguard.cli import common


def add_parser(sub: Any) -> None:
    from trainguard.observe import goodput  # light: no database driver

    parser = sub.add_parser(
        "goodput", help="productive time and time lost to failures, per workload, cause, node or policy",
        description="Goodput accounting from the audit log: productive time, and time lost to each failure "
        "split into work lost since the last checkpoint, detection, decision, action and requeue wait; "
        "MTTR, MTBF, and an estimate of the loss without Trainguard where one is honest. Read-only.",
    )
    common.add_settings_database_arguments(parser)
    parser.add_argument("--since", type=common.timestamp, metavar="ISO",
                        help="only attempts still running at or started after this time (ISO 8601; no offset: UTC)")
    parser.add_argument("--by", choices=goodput.GROUPINGS, default="workload", help="grouping (default: workload)")
    parser.add_argument("--job-timeout", type=common.seconds, default=goodput.DEFAULT_JOB_TIMEOUT_S, metavar="SECONDS",
                        help="the job's own hang timeout assumed without Trainguard (default: %(default)s, NCCL's)")
    parser.add_argument("--manual-delay", type=common.seconds, default=goodput.DEFAULT_MANUAL_DELAY_S,
                        metavar="SECONDS",
                        help="assumed time for a person to requeue a failed job without Trainguard "
                        "(default: %(default)s)")
    common.add_format_argument(parser, json_help="one JSON object per line", text_help="aligned columns")
    parser.set_defaults(func=run)


async def _rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    from trainguard.observe import goodput
    from trainguard.store import database
    from trainguard.store import goodput as facts

    store = await database.open_store(args.db, readonly=True)
    try:
        found = await facts.attempt_facts(store.sql_engine, since=args.since)
    finally:
        await store.close()
    assume = goodput.Assumptions(job_timeout_s=args.job_timeout, manual_delay_s=args.manual_delay)
    return goodput.rows(goodput.account(found, now=time.time(), assume=assume), by=args.by)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


_TABLE = ("failures", "productive_seconds", "lost_seconds", "work_lost_seconds", "detection_seconds",
          "decision_seconds", "action_seconds", "requeue_wait_seconds", "goodput", "mttr_seconds", "mtbf_seconds",
          "baseline_lost_seconds", "saved_seconds", "estimate")


def run(args: argparse.Namespace) -> int:
    from trainguard.store import database

    args.db = common.settings_database_url(args, "goodput")
    if args.db is None:
        return common.USAGE_ERROR
    try:
        rows = asyncio.run(_rows(args))
    except database.StoreError as exc:
        common.error("goodput", str(exc))
        return common.USAGE_ERROR
    out = sys.stdout
    if args.format == "json":
        for row in rows:
            out.write(json.dumps(row, sort_keys=True) + "\n")
    else:
        header = (args.by, *(c.removesuffix("_seconds") for c in _TABLE))
        table = [header, *((_fmt(row[args.by]), *(_fmt(row[c]) for c in _TABLE)) for row in rows)]
        widths = [max(len(line[i]) for line in table) for i in range(len(header))]
        for line in table:
            out.write("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() + "\n")
    out.flush()
    return 0
