"""`trainguard scorecard`: what happened after each Monitor-mode advice, scored, and whether a policy is
ready for Action.

A shell over ``observe/scorecard.py``: opens the audit database read-only (never creates or migrates
it), reads the scheduler when one is configured (``--scheduler``, as ``trainguard run`` takes it:
flags, ``TRAINGUARD_*`` and ``--config`` through ``cli/config.py``; only the flags it reads are offered,
the config file of ``run`` is accepted as it is), and prints one row per advice and
one summary per policy. ``--format json`` is a contract checked from outside: one JSON object per
line; an advice row has at least ``workload``, ``attempt``, ``advice`` and ``score``; a summary row
has ``"summary": true`` and ``policy`` (fields in docs/scorecard.md).
Exit codes: 0 printed (possibly nothing), 2 bad arguments or the database is missing or unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import Any

from trainguard.cli import common, config, logsetup, settings_io


def _share(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100.0 if text.endswith("%") else 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share such as 0.8 or 80%, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {text!r}")
    return value


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "scorecard", help="score each Monitor-mode advice by what happened next; ready for Action?",
        description="For every advice recorded in Monitor mode: was the job requeued (and by whom), the suspect "
        "node excluded or drained by someone else, did the job fail again on it, was it cancelled? Each advice is "
        "scored agree / disagree / would-have-helped / unknown with the evidence, and each policy gets a summary "
        "with its agreement rate, estimated GPU-hours saved, harmful advice and a 'ready for Action' signal. "
        "Read-only: nothing is changed in the database or the scheduler.",
    )
    settings_io.add_arguments(parser, config.ScorecardSettings)
    parser.add_argument("--policy-name", dest="policy_name", metavar="NAME",
                        help="only advice of the policy named NAME")
    parser.add_argument("--policy", dest="policy_name", metavar="NAME", action=common.DeprecatedAlias,
                        replacement="--policy-name NAME",
                        why=" (--policy is a policy FILE on run, doctor and backtest)",
                        help="deprecated spelling of --policy-name (--policy is a policy FILE on every other command)")
    parser.add_argument("--workload", metavar="ID", help="only advice of this workload")
    common.add_format_argument(parser, json_help="one JSON object per line (advice rows, then one summary per "
                               "policy)", text_help="aligned text")
    parser.add_argument("--gpus-per-node", type=common.positive, default=8, metavar="N",
                        help="GPUs per node for the GPU-hours estimate (default 8)")
    parser.add_argument("--min-scored", type=common.positive, default=5, metavar="N",
                        help="readiness: at least N advice scored other than unknown (default 5)")
    parser.add_argument("--min-agreement", type=_share, default=0.8, metavar="SHARE",
                        help="readiness: agree + would-have-helped share of scored advice (default 0.8)")
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective configuration (secrets redacted) as JSON and exit")
    parser.set_defaults(func=run)


async def _score(cfg: config.ScorecardSettings, args: argparse.Namespace, db_url: str) -> list[Any]:
    from trainguard.observe import scorecard_facts
    from trainguard.schedulers import base, factory
    from trainguard.store import database

    scheduler: base.Scheduler | None = None
    if cfg.scheduler:
        scheduler = factory.open_scheduler(
            cfg.scheduler, env=cfg.scheduler_env(), jwt=cfg.slurm_token_source(),
            client_keys=[str(k) for k in cfg.ssh_key] or None,
            known_hosts=str(cfg.known_hosts) if cfg.known_hosts else None,
        )
    try:
        store = await database.open_store(db_url, readonly=True)
        try:
            return await scorecard_facts.gather(store, scheduler, policy=args.policy_name, workload=args.workload,
                                                gpus_per_node=args.gpus_per_node)
        finally:
            await store.close()
    finally:
        if scheduler is not None:
            await scheduler.close()


def run(args: argparse.Namespace) -> int:
    from trainguard.observe import scorecard
    from trainguard.store import database

    flags = settings_io.flags_of(args, config.ScorecardSettings)
    logsetup.configure(logging.WARNING)
    try:
        cfg = settings_io.load(config.ScorecardSettings, flags)
        db_url = cfg.database_url()
    except config.ConfigError as exc:
        common.error("scorecard", str(exc))
        return common.USAGE_ERROR
    logsetup.configure(logging.WARNING if cfg.log_level == "INFO" else cfg.log_level, cfg.log_format)
    if args.print_config:
        return settings_io.print_config(cfg, flags)
    try:
        rows = asyncio.run(_score(cfg, args, db_url))
    except database.StoreError as exc:
        common.error("scorecard", str(exc))
        return common.USAGE_ERROR
    except (ValueError, OSError) as exc:  # a bad --scheduler spec or key file
        common.error("scorecard", str(exc))
        return common.USAGE_ERROR
    rule = scorecard.Readiness(min_scored=args.min_scored, min_agreement=args.min_agreement)
    summaries = scorecard.summarise(rows, rule)
    out = sys.stdout
    if args.format == "json":
        for row in rows:
            out.write(json.dumps(row.to_json(), sort_keys=True) + "\n")
        for summary in summaries:
            out.write(json.dumps(summary, sort_keys=True) + "\n")
    else:
        for row in rows:
            data = row.to_json()
            out.write(f"{data['workload']} #{data['attempt']} gen {data['generation']}  {data['advice']:<7} "
                      f"{data['score']:<17} {data['detail']:<28} nodes={','.join(data['nodes']) or '-'}  "
                      f"requeued_by={data['requeued_by']}  {'; '.join(data['evidence'])}\n")
        for summary in summaries:
            rate = summary["agreement_rate"]
            ready = "READY for Action" if summary["ready_for_action"] else \
                "not ready: " + "; ".join(summary["not_ready_because"])
            out.write(f"policy {summary['policy'] or '(none)'}: {summary['advice']} advice, {summary['scored']} "
                      f"scored, agreement {'n/a' if rate is None else f'{rate:.0%}'}, harmful {summary['harmful']}, "
                      f"~{summary['gpu_hours_saved']} GPU-hours saved; {ready}\n")
        if summaries:
            out.write(f"rule: {rule.describe()}\n")
    out.flush()
    return 0
