"""The cluster switch and the runtime pause: read before every step of every recovery.

Place in the loop: consulted by the executor before each scheduler mutation of an Action-mode
generation (fresh, resumed after a restart, or released after a retry backoff), and by the node
housekeeping (``act.undrain``). Two keys must be on for Trainguard to change the scheduler: the
cluster-wide switch (``--mode action`` / ``TRAINGUARD_MODE=action``) and the workload's policy in
``Action`` mode. The advice records the policy's mode when it is decided; the switch is what the
process runs with *now*, so an Action advice recorded before a restart with ``--mode monitor`` is
never carried out after it.

The runtime pause needs no restart: a person sets it with ``trainguard actions pause``, the HTTP API, the
console or (under the operator) the ``trainguard-control`` ConfigMap, and it is stored in the audit
database (table ``controls``), so every replica and every restart sees it. Each step reads it
afresh: a pause takes effect at the next step of anything in flight and within one sweep for
generations waiting on a backoff.

The breaker (``BREAKER``, same table) is a third stop: it opens by itself when an administrator's
cap (``limits.AdminCaps``) refuses an advice, in the same transaction as that refusal
(``store.audit.AuditStore.reserve_limits``), and stays open (latched) until a person resets it with
``trainguard actions reset-breaker`` or ``POST /api/v1/actions/breaker/reset``.

When any key is off, a pending Action generation is closed by the watchdog: our own holds are
released (never leave a job held), nothing else is changed, and the audit record says why.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from trainguard.model import vocab

logger = logging.getLogger(__name__)

PAUSE = "actions-paused"
"""Name of the runtime pause in the store's ``controls`` table."""
BREAKER = "actions-breaker"
"""Name of the latched breaker in the store's ``controls`` table (``{"open": bool, "reason": ...}``)."""


class ControlRecordLike(Protocol):
    """A stored control (``store.audit.ControlRecord``)."""

    @property
    def value(self) -> dict[str, Any]: ...

    @property
    def updated_by(self) -> str: ...

    @property
    def updated_at(self) -> float: ...


class Controls(Protocol):
    """Where the runtime pause is kept (``store.audit.AuditStore``)."""

    async def control(self, name: str) -> Any: ...


def pause_reason(record: ControlRecordLike | None) -> str | None:
    """Why actions are paused according to ``record`` (the stored pause control), or None if not paused."""
    if record is None or not record.value.get("paused"):
        return None
    reason = str(record.value.get("reason") or "no reason given")
    return f"actions are paused by {record.updated_by or 'someone'}: {reason}"


def breaker_reason(record: ControlRecordLike | None) -> str | None:
    """Why the breaker stops every action according to ``record`` (the stored breaker), or None if closed."""
    if record is None or not record.value.get("open"):
        return None
    reason = str(record.value.get("reason") or "no reason recorded")
    return (f"the blast-radius breaker is open since an administrator's cap tripped ({reason}); "
            "a person resets it with `trainguard actions reset-breaker`")


def effective_mode(declared: vocab.Mode, allow_action: bool, paused: str | None = None) -> vocab.Mode:
    """The one rule for the mode a policy acts in: its declared ``Action`` only while the cluster switch
    is on and nothing pauses actions (``paused``: the reason, from ``ActionSwitch.blocked``); ``Monitor``
    otherwise. The engine, the HTTP API, the console and the operator's status all ask this."""
    if declared == vocab.Mode.ACTION and allow_action and paused is None:
        return vocab.Mode.ACTION
    return vocab.Mode.MONITOR


class ActionSwitch:
    """Both run-time keys an Action step needs: the process's switch and the stored pause."""

    def __init__(self, allow_action: bool, controls: Controls | None = None) -> None:
        self.allow_action = allow_action
        """The cluster-wide switch this process runs with (``--mode action``)."""
        self._controls = controls

    async def blocked(self) -> str | None:
        """Why no Action step may run now, or None when both keys allow it and the breaker is closed. A
        store that cannot be read blocks too (the step would need the store for its intent row anyway)."""
        if not self.allow_action:
            return "the cluster switch is off (this process runs with --mode monitor)"
        if self._controls is None:
            return None
        try:
            record = await self._controls.control(PAUSE)
            breaker = await self._controls.control(BREAKER)
        except Exception as exc:
            return f"the runtime pause cannot be read ({type(exc).__name__}: {exc})"
        return pause_reason(record) or breaker_reason(breaker)


ALWAYS_ON = ActionSwitch(True)
"""For callers (and tests) that construct an executor without a switch: the advice's own mode decides."""
