"""`trainguard backtest`: replay the recorded decisions under a changed policy and show what differs.

A shell over ``journal.backtest``: opens the audit database read-only, reads the signal journal's
decisions (``--since``/``--until``/``--workload``), replays each under the policies of ``--policy``
and prints the decisions that would differ, then a summary.

``--format json`` (a contract): one JSON object per line; each decision row has at least
``workload``, ``attempt``, ``recorded`` and ``replayed`` (the advice action under the recorded and the
new policy), plus exclusions, drains, ``stop_vs_retry`` and ``blocked_by`` (a blast-radius limit);
the LAST line is the summary, told apart by ``"summary": true`` (rows never carry that key).
``--all`` prints every decision, changed or not. Exit codes: 0 printed, 2 bad arguments, an invalid
policy file, or the database missing, unreachable or without a journal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from trainguard.cli import common


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "backtest", help="replay recorded decisions under a changed policy and show what would differ",
        description="Replay the signal journal's recorded decisions under NEW.yaml (recorded inputs and clock) "
        "and print each decision that would differ, then a summary. Read-only.",
    )
    parser.add_argument("--policy", required=True, type=Path, metavar="NEW.yaml",
                        help="the changed policy file (RecoveryPolicy documents)")
    parser.add_argument("--since", type=common.timestamp, metavar="ISO", help="decisions at or after this time")
    parser.add_argument("--until", type=common.timestamp, metavar="ISO", help="decisions at or before this time")
    parser.add_argument("--workload", metavar="ID", help="only this workload's decisions")
    common.add_settings_database_arguments(parser)
    parser.add_argument("--all", action="store_true", help="print every decision, not only those that differ")
    common.add_format_argument(parser, json_help="one object per line, the summary last", text_help="aligned text")
    parser.set_defaults(func=run)


async def _replay(args: argparse.Namespace, policies: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from trainguard.journal import backtest
    from trainguard.store import database
    from trainguard.store import journal as journal_store

    store = await database.open_store(args.db, readonly=True)
    try:
        journal = journal_store.JournalStore(store.sql_engine, retention_s=0, max_bytes=0)
        decisions = await backtest.load(
            journal, workload=args.workload, since=args.since.timestamp() if args.since else None,
            until=args.until.timestamp() if args.until else None)
    finally:
        await store.close()
    return backtest.run(decisions, policies, every=args.all)


def run(args: argparse.Namespace) -> int:
    import sqlalchemy.exc

    from trainguard.policy import loader
    from trainguard.store import database

    try:
        policies = loader.load_file(args.policy)
    except loader.PolicyError as exc:
        common.error("backtest", str(exc))
        return common.USAGE_ERROR
    args.db = common.settings_database_url(args, "backtest")
    if args.db is None:
        return common.USAGE_ERROR
    try:
        rows, summary = asyncio.run(_replay(args, policies))
    except database.StoreError as exc:
        common.error("backtest", str(exc))
        return common.USAGE_ERROR
    except sqlalchemy.exc.OperationalError as exc:
        common.error("backtest", f"cannot read the signal journal (a database older than migration 0008?): {exc}")
        return common.USAGE_ERROR
    out = sys.stdout
    if args.format == "json":
        for row in [*rows, summary]:
            out.write(json.dumps(row, sort_keys=True) + "\n")
    else:
        _table(rows, summary, out)
    out.flush()
    return 0


def _table(rows: list[dict[str, Any]], summary: dict[str, Any], out: Any) -> None:
    for row in rows:
        extra = []
        if row["recorded_exclusions"] != row["replayed_exclusions"]:
            extra.append(f"exclude {row['recorded_exclusions']} -> {row['replayed_exclusions']}")
        if row["recorded_drains"] != row["replayed_drains"]:
            extra.append(f"drain {row['recorded_drains']} -> {row['replayed_drains']}")
        if row["blocked_by"]:
            extra.append(f"BLOCKED: {row['blocked_by']}")
        if row["after_change"]:
            extra.append("(after an earlier change)")
        out.write(f"{row['workload']} #{row['attempt']} gen {row['generation']}  {row['category']:<20} "
                  f"{row['recorded']:>8} -> {row['replayed']:<8} {'  '.join(extra)}\n")
    out.write(
        f"{summary['decisions']} decisions of {summary['workloads']} workloads replayed; "
        f"{summary['changed_decisions']} differ ({summary['workloads_affected']} workloads affected); "
        f"requeues {summary['requeues_recorded']} -> {summary['requeues_replayed']} "
        f"(+{summary['extra_requeues']} / -{summary['removed_requeues']}); "
        f"nodes excluded {len(summary['nodes_excluded_recorded'])} -> {len(summary['nodes_excluded_replayed'])}, "
        f"drained {len(summary['nodes_drained_recorded'])} -> {len(summary['nodes_drained_replayed'])}; "
        f"{summary['blocked_by_limits']} blocked by limits; {summary['not_covered']} not covered\n")
    for note in summary["notes"]:
        out.write(f"note: {note}\n")
