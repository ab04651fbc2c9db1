"""What people act on, picked out of the committed audit records: the notifier's events.

Place: the first step of the notifier (``observe.notify``). The audit store tells its observers
every committed record (``store.audit.Written``); ``event_of`` keeps the few that ask a person to
look, and names each with a closed ``Kind``, a severity and a *subject* (the workload, the node or
the cluster-wide control it is about). Pure: no I/O, no clock, so the rules are unit-tested alone.

Which records become which event (everything else is none):

- ``monitor-advice``: an advice recorded in Monitor mode that asks for something (not ``none``);
- ``action-done``: a scheduler step we carried out (``action`` record, status ``done``);
- ``limit-tripped``: a blast-radius limit refused an Action generation (Abandoned, ``would_block``)
  or refused its drains (degraded); a refusal by an administrator's cap is told as ``breaker-open``;
- ``breaker-open`` / ``breaker-reset``: the latched breaker opened / a person reset it (the reset
  resolves the open one: same ``incident``);
- ``recovery-stuck``: the watchdog found a generation past its deadline, or could not release a
  hold of ours (the job may stay held);
- ``recovery-abandoned``: any other Abandoned generation (a failed step, a verify that failed).
  A deadline's Abandoned outcome is not told again: its ``recovery-stuck`` came just before it;
- ``node-held``: a node held for repair in the node lifecycle (``model.lifecycle``): a person's hold
  (operation ``node-held``), a repeat offender (``node-repeat-offender``), a failed validation
  (``node-validation-failed``, once validation exists); its subject is the node.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from trainguard.model import actions, vocab

if TYPE_CHECKING:  # the settings import this module's kinds: no database library on their path
    from trainguard.store import audit


class Kind(enum.StrEnum):
    """Event kinds: a contract of the webhook payload and of the config's ``events`` filters."""

    MONITOR_ADVICE = "monitor-advice"
    ACTION_DONE = "action-done"
    LIMIT_TRIPPED = "limit-tripped"
    BREAKER_OPEN = "breaker-open"
    BREAKER_RESET = "breaker-reset"
    RECOVERY_STUCK = "recovery-stuck"
    RECOVERY_ABANDONED = "recovery-abandoned"
    NODE_HELD = "node-held"


class Severity(enum.StrEnum):
    """PagerDuty's four severities, lowest first (every target uses the same scale)."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return list(Severity).index(self)


SEVERITY: Final[Mapping[Kind, Severity]] = {
    Kind.MONITOR_ADVICE: Severity.INFO, Kind.ACTION_DONE: Severity.INFO, Kind.LIMIT_TRIPPED: Severity.WARNING,
    Kind.BREAKER_OPEN: Severity.CRITICAL, Kind.BREAKER_RESET: Severity.INFO, Kind.RECOVERY_STUCK: Severity.ERROR,
    Kind.RECOVERY_ABANDONED: Severity.ERROR, Kind.NODE_HELD: Severity.WARNING,
}
RESOLVES: Final[Mapping[Kind, Kind]] = {Kind.BREAKER_RESET: Kind.BREAKER_OPEN}
"""A kind that ends the incident of another (PagerDuty ``resolve``; a target that takes the opening kind
takes its resolution too)."""


@dataclasses.dataclass(frozen=True)
class Event:
    """One thing to tell people, from one audit record."""

    kind: Kind
    subject: str
    """What it is about: the workload id, the node (``node-held``) or the control (the breaker)."""
    summary: str
    at: float
    workload: str = ""
    attempt: int | None = None
    generation: int | None = None
    node: str = ""
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def severity(self) -> Severity:
        return SEVERITY[self.kind]

    @property
    def incident(self) -> str:
        """The key an incident is known by across messages (PagerDuty's ``dedup_key``): a resolving kind
        shares its opening kind's."""
        return f"trainguard/{RESOLVES.get(self.kind, self.kind).value}/{self.subject}"

    @property
    def resolves(self) -> bool:
        return self.kind in RESOLVES


def event_of(record: audit.Written) -> Event | None:
    """The event ``record`` is, or None when it is nothing a person acts on."""
    classify = _CLASSIFIERS.get(record.kind)
    return classify(record) if classify is not None else None


def _base(record: audit.Written, kind: Kind, summary: str, subject: str = "", **detail: Any) -> Event:
    generation = record.payload.get("generation")
    return Event(kind=kind, subject=subject or record.workload or "cluster", summary=summary, at=record.at,
                 workload=record.workload, attempt=record.attempt,
                 generation=generation if isinstance(generation, int) else None,
                 detail={k: v for k, v in detail.items() if v not in (None, "", [], {})})


def _where(record: audit.Written) -> str:
    generation = record.payload.get("generation")
    text = f"{record.workload} attempt {record.attempt}"
    return f"{text} generation {generation}" if generation is not None else text


def _advice(record: audit.Written) -> Event | None:
    payload = record.payload
    action = str(payload.get("action", ""))
    if payload.get("mode") != vocab.Mode.MONITOR.value or action in ("", vocab.AdviceAction.NONE.value):
        return None
    excluded = [str(n) for n in payload.get("exclusions") or payload.get("exclude_nodes") or []]
    reasons = [str(r) for r in payload.get("reasons") or []]
    text = f"{_where(record)}: Monitor advice {action}" + (f" excluding {', '.join(excluded)}" if excluded else "")
    if reasons:
        text += f" ({reasons[0]})"
    return _base(record, Kind.MONITOR_ADVICE, text + "; recorded, not carried out", action=action,
                 exclusions=excluded, reasons=reasons, policy=payload.get("policy"))


_QUIET: Final = frozenset(o.value for o in (
    actions.Operation.RESERVE_NODE, actions.Operation.RESUME_RESERVED, actions.Operation.SUBMIT_CHECK,
    actions.Operation.CANCEL_CHECK, actions.Operation.UNRESERVE_NODE))
"""The inner steps of a validation round (``act.validate``): told through its verdict (``validate_node``), the
node's return or its new drain, and a hold (``node-validation-failed``), not one message per step."""
_OPERATIONS: Final = frozenset(o.value for o in actions.Operation) - _QUIET
_HELD: Final = frozenset({"node-held", "node-repeat-offender", "node-validation-failed"})
"""The lifecycle's audit operations (``store.nodes``, ``node-<event>``) that leave a node held for repair."""


def _action(record: audit.Written) -> Event | None:
    payload = record.payload
    operation = str(payload.get("operation", ""))
    if operation == "breaker-open":
        control = str(payload.get("control") or "breaker")
        return _base(record, Kind.BREAKER_OPEN, f"the blast-radius breaker opened: {payload.get('reason', '?')}; no "
                     "recovery changes the scheduler until a person resets it (trainguard actions reset-breaker)",
                     subject=control, reason=payload.get("reason"), refused_workload=record.workload)
    if operation == "breaker-reset":
        control = str(payload.get("control") or "breaker")
        return _base(record, Kind.BREAKER_RESET, f"the blast-radius breaker was reset by {payload.get('by', '?')}: "
                     f"{payload.get('reason', '')}".rstrip(": "), subject=control, by=payload.get("by"))
    if operation in _HELD and payload.get("node"):
        node = str(payload["node"])
        held = _base(record, Kind.NODE_HELD, f"{node} held for repair ({operation.removeprefix('node-')}, by "
                     f"{payload.get('by', '?')}): {payload.get('reason', '')}; stays out until a person returns it "
                     "(trainguard nodes return)", subject=node, reason=payload.get("reason"), by=payload.get("by"))
        return dataclasses.replace(held, node=node)
    if payload.get("status") != actions.ActionStatus.DONE.value or operation not in _OPERATIONS:
        return None
    node = str((payload.get("arguments") or {}).get("node") or "")
    text = f"{_where(record)}: {operation} done (step {payload.get('step', '?')}" + (f", node {node})" if node else ")")
    return _base(record, Kind.ACTION_DONE, text, operation=operation, step=payload.get("step"), node=node,
                 decided_by=record.decided_by)


def _outcome(record: audit.Written) -> Event | None:
    payload = record.payload
    found = payload.get("blast_radius")
    limits: dict[str, Any] = found if isinstance(found, dict) else {}
    disposition = payload.get("disposition")
    detail = str(payload.get("detail", ""))
    if disposition == vocab.Disposition.ABANDONED.value:
        if limits.get("breaker"):
            return None  # the breaker-open record of the same decision says it, at a higher severity
        if limits.get("would_block"):
            return _base(record, Kind.LIMIT_TRIPPED, f"{_where(record)}: refused by a blast-radius limit: "
                         f"{limits.get('reason', '?')}", limit=limits.get("reason"), action=payload.get("action"))
        if detail.startswith("deadline passed"):
            return None  # told as recovery-stuck by the watchdog record written just before
        return _base(record, Kind.RECOVERY_ABANDONED, f"{_where(record)}: recovery ({payload.get('action', '?')}) "
                     f"abandoned: {detail}; the scheduler's default behaviour applies", action=payload.get("action"),
                     reason=detail)
    if disposition == vocab.Disposition.CONVERGED.value and limits.get("refused_drains"):
        drains = [str(n) for n in limits["refused_drains"]]
        return _base(record, Kind.LIMIT_TRIPPED, f"{_where(record)}: drains of {', '.join(drains)} refused by a "
                     f"blast-radius limit; the rest was carried out", refused_drains=drains)
    return None


def _watchdog(record: audit.Written) -> Event | None:
    payload = record.payload
    reason = str(payload.get("reason", ""))
    if payload.get("release_error"):
        return _base(record, Kind.RECOVERY_STUCK, f"{_where(record)}: a hold of ours could not be released: "
                     f"{payload['release_error']} (retried at the next start)", reason=reason,
                     release_error=payload.get("release_error"))
    if reason.startswith("deadline passed"):
        return _base(record, Kind.RECOVERY_STUCK, f"{_where(record)}: recovery not done before its deadline "
                     f"({reason}); abandoned, holds of ours released: {payload.get('released_hold') is True}",
                     reason=reason, released_hold=payload.get("released_hold"))
    return None


_CLASSIFIERS: Final[dict[str, Callable[[audit.Written], Event | None]]] = {
    vocab.AuditKind.ADVICE.value: _advice,
    vocab.AuditKind.ACTION.value: _action,
    vocab.AuditKind.OUTCOME.value: _outcome,
    vocab.AuditKind.WATCHDOG.value: _watchdog,
}
"""Audit kind -> its classifier. The node lifecycle adds its record kind here (``Kind.NODE_HELD``, subject
the node)."""
