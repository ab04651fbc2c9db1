"""`trainguard audit`: print the audit log (the record of every detection, decision and action).

A shell over ``store``: opens the database read-only (it never creates or migrates one)
and prints ``store.audit.AuditRecord`` values oldest first. ``--format json`` is a contract
checked from outside: one JSON object per line with ``time`` (UTC ISO 8601 with
microseconds and ``+00:00``), ``workload``, ``attempt``, ``kind`` and ``payload``.
Exit codes: 0 printed (possibly nothing), 2 bad arguments or the database is missing or
unreachable (the message names it, password hidden).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

from trainguard.cli import common
from trainguard.model import vocab

if TYPE_CHECKING:
    from trainguard.store import audit


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "audit", help="print the audit log (detections, verdicts, advice, actions, outcomes)",
        description="Print the audit log, oldest first. Read-only: the database is never created or changed.",
    )
    common.add_settings_database_arguments(parser)
    parser.add_argument("--workload", metavar="ID", help="only records of this workload")
    parser.add_argument("--kind", choices=[k.value for k in vocab.AuditKind], help="only records of this kind")
    parser.add_argument("--since", type=common.timestamp, metavar="ISO",
                        help="only records at or after this time (ISO 8601; no offset means UTC)")
    parser.add_argument("--limit", type=common.positive, metavar="N", help="only the N most recent matching records")
    common.add_format_argument(parser, json_help="one JSON object per line", text_help="one aligned line per record")
    parser.set_defaults(func=run)


async def _read(args: argparse.Namespace) -> list[audit.AuditRecord]:
    from trainguard.store import database  # here, not at the top: keeps `trainguard --help` light

    store = await database.open_store(args.db, readonly=True)
    try:
        return await store.audit_records(
            workload=args.workload, kind=None if args.kind is None else vocab.AuditKind(args.kind),
            since=args.since, limit=args.limit,
        )
    finally:
        await store.close()


def _summary(record: audit.AuditRecord) -> str:
    payload = record.payload
    match record.kind:
        case vocab.AuditKind.ANOMALY:
            return f"{payload.get('symptom')} {payload.get('category')} suspects={payload.get('suspect_nodes')}"
        case vocab.AuditKind.VERDICT:
            return f"{payload.get('attribution')} {payload.get('category')} nodes={payload.get('nodes')}"
        case vocab.AuditKind.ADVICE:
            return (f"gen {payload.get('generation')} {payload.get('action')} mode={payload.get('mode')} "
                    f"exclude={payload.get('exclusions')} reasons={payload.get('reasons')}")
        case vocab.AuditKind.ACTION:
            text = f"gen {payload.get('generation')} {payload.get('operation')} {payload.get('status')} " \
                   f"{payload.get('arguments')}"
            return f"{text} {payload['error']}" if payload.get("error") else text
        case vocab.AuditKind.OUTCOME:
            return f"gen {payload.get('generation')} {payload.get('disposition')}: {payload.get('detail')}"
        case vocab.AuditKind.WATCHDOG:
            released = payload.get("released_hold")
            return f"gen {payload.get('generation')} {payload.get('reason')} released_hold={released}"
    return json.dumps(payload, sort_keys=True)


def run(args: argparse.Namespace) -> int:
    from trainguard.store import audit, database

    args.db = common.settings_database_url(args, "audit")
    if args.db is None:
        return common.USAGE_ERROR
    try:
        records = asyncio.run(_read(args))
    except database.StoreError as exc:
        print(f"trainguard audit: {exc}", file=sys.stderr)
        return 2
    out = sys.stdout
    for record in records:
        if args.format == "json":
            out.write(json.dumps(record.to_json(), sort_keys=True) + "\n")
        else:
            attempt = "-" if record.attempt is None else str(record.attempt)
            out.write(f"{audit.iso_utc(record.time)}  {record.kind.value:<8} {record.workload} #{attempt}  "
                      f"{_summary(record)}  [{record.decided_by}]\n")
    out.flush()
    return 0
