"""`trainguard actions pause|resume|status|reset-breaker`: the runtime pause and the breaker.

A shell over the store's ``controls`` table (``act.switch``): ``pause`` stops every pending step of
every recovery, in every replica, from the next step on (within one sweep for generations waiting on a
backoff), without a restart; pending Action generations are closed with our holds released and the
audit says why. ``resume`` allows Action-mode policies to act again (only on new decisions: what was
closed while paused stays closed). Both write an audit record (kind ``action``, no workload). Detection,
verdicts and advice go on while paused: the pause stops changes to the scheduler, not the record.

``reset-breaker`` closes the blast-radius breaker, which opened by itself when an administrator's cap
(``--max-actions-per-hour``, ``--max-nodes-out``, ``--max-nodes-out-share``) refused an advice and stays
open until a person resets it (audited the same way). ``status`` shows it too.

It opens the database exactly as ``run`` and ``operator`` do (``--db``, ``--db-file``, ``--home``,
``--config``, or TRAINGUARD_DB_URL, TRAINGUARD_DB_URL_FILE, TRAINGUARD_HOME). Exit codes: 0 done, 1 the
database cannot be opened, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

from trainguard.cli import common

if TYPE_CHECKING:
    from trainguard.store import audit


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("actions", help="pause or resume every recovery action at run time (no restart)",
                            description="The runtime pause: while it is set, no recovery changes the scheduler "
                            "(detection and advice go on and are recorded).")
    verbs = parser.add_subparsers(dest="actions_verb", metavar="VERB", required=True)
    pause = verbs.add_parser("pause", help="stop every pending and future step of every recovery",
                             description="Set the runtime pause: every replica stops before its next step; pending "
                             "Action generations are closed, our holds released. Audited.")
    pause.add_argument("--reason", required=True, help="why (recorded in the audit log and shown in the console)")
    resume = verbs.add_parser("resume", help="allow Action-mode policies to act again",
                              description="Clear the runtime pause. Audited.")
    status = verbs.add_parser("status", help="print whether actions are paused, by whom and why",
                              description="Print the runtime pause and the breaker as stored.")
    common.add_format_argument(status, json_help="one object {paused, reason, by, since, breaker}",
                               text_help="one line each")
    reset = verbs.add_parser("reset-breaker", help="close the blast-radius breaker an administrator's cap opened",
                             description="Close the latched breaker: Action-mode policies act again on new decisions "
                             "(what it stopped stays closed). Audited.")
    reset.add_argument("--reason", required=True, help="why it is safe again (recorded in the audit log)")
    for verb in (pause, resume, status, reset):
        common.add_settings_database_arguments(verb)
    for verb in (pause, resume, reset):
        verb.add_argument("--by", default=None, metavar="NAME",
                          help="who is recorded as having set it (default: USER@HOST of this shell)")
    parser.set_defaults(func=run)


def _who(args: argparse.Namespace) -> str:
    return common.who(args.by)


def run(args: argparse.Namespace) -> int:
    url = common.settings_database_url(args, "actions")
    if url is None:
        return 2
    return asyncio.run(_run(args, url))


async def _run(args: argparse.Namespace, url: str) -> int:
    import time

    from trainguard.act import switch
    from trainguard.store import database

    try:
        store = await database.open_store(url)
    except database.StoreError as exc:
        print(f"trainguard actions: {exc}", file=sys.stderr)
        return 1
    try:
        if args.actions_verb == "status":
            return await _status(store, args.format)
        if args.actions_verb == "reset-breaker":
            return await _reset_breaker(store, _who(args), args.reason)
        paused = args.actions_verb == "pause"
        value: dict[str, Any] = {"paused": paused, "reason": args.reason if paused else ""}
        await store.set_control(switch.PAUSE, value, by=_who(args), channel="cli", at=time.time(),
                                payload={"operation": "pause" if paused else "resume-actions", "status": "done",
                                         "reason": value["reason"]})
        print("actions paused: no recovery changes the scheduler until `trainguard actions resume`" if paused
              else "actions resumed: Action-mode policies act again (when the cluster switch is on)")
        return 0
    finally:
        await store.close()


async def _status(store: audit.AuditStore, form: str) -> int:
    from trainguard.act import switch

    record = await store.control(switch.PAUSE)
    reason = switch.pause_reason(record)
    breaker = await store.control(switch.BREAKER)
    tripped = switch.breaker_reason(breaker)
    view = {"paused": reason is not None,
            "reason": str(record.value.get("reason", "")) if record is not None and reason else "",
            "by": record.updated_by if record is not None else "",
            "since": record.updated_at if record is not None else None,
            "breaker": {"open": tripped is not None,
                        "reason": str(breaker.value.get("reason", "")) if breaker is not None else "",
                        "by": breaker.updated_by if breaker is not None else "",
                        "since": breaker.updated_at if breaker is not None else None}}
    if form == "json":
        print(json.dumps(view, sort_keys=True))
    else:
        print(reason or "actions are not paused (each Action-mode policy acts when the cluster switch is on)")
        print(tripped or "the blast-radius breaker is closed")
    return 0


async def _reset_breaker(store: audit.AuditStore, who: str, reason: str) -> int:
    import time

    from trainguard.act import switch

    before = switch.breaker_reason(await store.control(switch.BREAKER))
    await store.set_control(switch.BREAKER, {"open": False, "reason": "", "reset_reason": reason}, by=who,
                            channel="cli", at=time.time(),
                            payload={"operation": "breaker-reset", "status": "done", "reason": reason,
                                     "was_open": before is not None})
    print("breaker reset: Action-mode policies act again on new decisions" if before
          else "the breaker was not open (the reset is recorded)")
    return 0
