"""`trainguard nodes [list|show NODE|return NODE|hold NODE]`: the node lifecycle, and a person's decisions on it.

A shell over the store's node lifecycle (``model.lifecycle``, ``store.nodes``). ``list`` (the default)
prints each node's current state; ``--format json`` is a contract (``mission.md`` "Node lifecycle"):
one JSON object per line with ``node``, ``state`` (``in-service``, ``suspect``, ``out-of-service``,
``validating``, ``held-for-repair``, ``other``), ``reason``, ``since`` (UTC ISO 8601), and ``event``,
``by``, ``workload``, ``attempt``. ``show NODE`` adds the node's history (every transition with its
evidence) and the incidents charged to it (lemon-node memory).

``hold`` and ``return`` are a person's decisions, recorded with who made them (``--by``, default
USER@HOST) and why, in one transaction with their audit record. Neither touches the scheduler here:
``hold`` keeps a node we took out of service out until a person returns it (no rule of time resumes
it); ``return`` clears it, and the engine resumes it at its next sweep through the undrainer (still our
drain, the policy's mode; ``act.undrain``). A decision the lifecycle refuses (a node in service or out
for someone else's reason: we did not take it out) prints why and changes nothing.

The database is found exactly as ``run`` finds it (``--db``, ``--db-file``, ``--home``, ``--config``).
Exit codes: 0 done, 1 refused or the database cannot be opened, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from trainguard.cli import common
from trainguard.model import times

if TYPE_CHECKING:
    from trainguard.model import lifecycle
    from trainguard.store import audit

REFUSED = 1


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("nodes", help="the node lifecycle: which nodes are out of service and why; hold, return",
                            description="Each node's lifecycle state (in-service, suspect, out-of-service, "
                            "validating, held-for-repair, other), and a person's hold or return of a node.")
    _common(parser, formatted=True, suppress=False)
    verbs = parser.add_subparsers(dest="nodes_verb", metavar="VERB")
    listing = verbs.add_parser("list", help="each node's state (the default)", description="Each node's state.")
    _common(listing, formatted=True, suppress=True)
    show = verbs.add_parser("show", help="one node's state, history and evidence",
                            description="One node's state, every transition with its evidence, its incidents.")
    show.add_argument("node", metavar="NODE", help="the node's name as the scheduler knows it")
    _common(show, formatted=True, suppress=True)
    for name, text in (("hold", "keep a node we took out of service out until a person returns it"),
                       ("return", "clear a node for return: Trainguard resumes it at its next sweep")):
        verb = verbs.add_parser(name, help=text, description=f"{text[0].upper()}{text[1:]}. Recorded with who "
                                "and why; the scheduler is not touched by this command.")
        verb.add_argument("node", metavar="NODE", help="the node's name as the scheduler knows it")
        verb.add_argument("--reason", required=True, help="why (recorded in the lifecycle and the audit log)")
        verb.add_argument("--by", default=None, metavar="NAME",
                          help="who is recorded as having decided (default: USER@HOST of this shell)")
        _common(verb, formatted=False, suppress=True)
    parser.set_defaults(func=run, nodes_verb=None)


def _common(parser: argparse.ArgumentParser, *, formatted: bool, suppress: bool) -> None:
    """The database flags (and ``--format``) on ``nodes`` itself and on each verb; a verb's defaults are
    suppressed so ``trainguard nodes --db URL show n1`` keeps the URL given before the verb (``--format``
is the verb's own: give it after the verb)."""
    before = len(parser._actions)
    common.add_settings_database_arguments(parser)
    if suppress:
        for action in parser._actions[before:]:
            action.default = argparse.SUPPRESS
    if formatted:
        common.add_format_argument(parser, json_help="one JSON object per line (node, state, reason, since, ...)",
                                   text_help="one aligned line per node")


def run(args: argparse.Namespace) -> int:
    url = common.settings_database_url(args, "nodes")
    if url is None:
        return common.USAGE_ERROR
    return asyncio.run(_run(args, url))


async def _run(args: argparse.Namespace, url: str) -> int:
    from trainguard.model import lifecycle
    from trainguard.store import database

    verb = args.nodes_verb or "list"
    try:
        store = await database.open_store(url, readonly=verb in ("list", "show"))
    except database.StoreError as exc:
        print(f"trainguard nodes: {exc}", file=sys.stderr)
        return 1
    try:
        if verb == "list":
            for item in await store.node_states():
                _print(row(item), args.format)
            return 0
        if verb == "show":
            return await _show(store, args.node, args.format)
        event = lifecycle.NodeEvent.HELD if verb == "hold" else lifecycle.NodeEvent.CLEARED
        try:
            moved = await store.decide_node(args.node, event, by=common.who(args.by), channel="cli", at=time.time(),
                                            reason=args.reason)
        except lifecycle.Refused as exc:
            print(f"trainguard nodes {verb}: refused, nothing changed: {exc}", file=sys.stderr)
            return REFUSED
        print(f"{moved.node}: {moved.state.value} (by {moved.by})"
              + (": Trainguard resumes it at its next sweep if it is still our drain" if verb == "return" else
                 ": no rule of time resumes it until a person returns it"))
        return 0
    finally:
        await store.close()


def row(item: lifecycle.Transition) -> dict[str, Any]:
    """One node's line of ``--format json`` (the contract's fields first, then where they came from)."""
    return {"node": item.node, "state": item.state.value, "reason": item.reason,
            "since": times.iso_utc(times.to_datetime(item.at)), "event": item.event.value, "by": item.by,
            "workload": item.workload, "attempt": item.attempt}


def _print(view: dict[str, Any], form: str) -> None:
    if form == "json":
        print(json.dumps(view, sort_keys=True))
    else:
        print(f"{view['node']:<24} {view['state']:<16} {view['since']}  {view['reason']}  [{view['by']}]")


async def _show(store: audit.AuditStore, node: str, form: str) -> int:
    history = await store.node_transitions(node)
    incidents = [i for i in await store.node_history(since=0.0) if i.node == node]
    if not history and not incidents:
        print(f"trainguard nodes show: nothing recorded of {node} (in service as far as Trainguard knows)",
              file=sys.stderr)
        return REFUSED
    view: dict[str, Any] = row(history[-1]) if history else {"node": node, "state": "in-service", "reason": "",
                                                              "since": None}
    steps: list[dict[str, Any]] = [{**row(t), "evidence": t.evidence} for t in history]
    charged: list[dict[str, Any]] = [{"workload": i.workload, "attempt": i.attempt, "category": i.category,
                                      "at": times.iso_utc(times.to_datetime(i.at))} for i in incidents]
    view["history"], view["incidents"] = steps, charged
    if form == "json":
        print(json.dumps(view, sort_keys=True))
        return 0
    print(f"{node}: {view['state']} since {view['since']}  {view['reason']}")
    for t in steps:
        evidence = f"  {json.dumps(t['evidence'], sort_keys=True)}" if t["evidence"] else ""
        print(f"  {t['since']}  {t['event']:<24} -> {t['state']:<16} {t['reason']}  [{t['by']}]{evidence}")
    for i in charged:
        print(f"  incident {i['at']}  {i['workload']} attempt {i['attempt']}: {i['category']}")
    return 0
