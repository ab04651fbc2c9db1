"""De-duplication: a cascade of events is one message, a burst is one message with its count.

Place: between the audit observer's queue and the targets (``observe.notify.service``). Pure and
clock-driven (``offer(event, now)``, ``due(now)``), so the rule is unit-tested without sleeping.

The rule, per key (kind, subject), the subject being the workload, the node or the control:

1. The first event of a key opens a group that is sent ``settle`` seconds later; every event of the
   same key meanwhile joins it (the ranks of one job failing together, the steps of one recovery).
2. When a group falls due, every other open group of its kind goes with it, in one message (one switch
   failing under fifty jobs: one "monitor-advice for 50 workloads", not fifty); a group waiting for
   the end of its quiet window (3.) waits on.
3. After a key was sent it is quiet for ``window`` seconds: its events are collected and sent as one
   follow-up message with their count when the window ends, never one by one.

A message keeps the first ``SAMPLE`` events in full and counts the rest.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from trainguard.observe.notify import events as events_mod

SAMPLE: Final = 10
"""Events kept in full per message (the rest are counted)."""
SHOWN_SUBJECTS: Final = 5
"""Subjects named in a merged message's summary."""
MAX_QUIET: Final = 10_000
"""Quiet keys remembered at most (the oldest are forgotten: memory stays bounded)."""

Key = tuple[events_mod.Kind, str]


@dataclasses.dataclass
class Message:
    """One notification: one event, or several of one kind folded together."""

    kind: events_mod.Kind
    events: list[events_mod.Event]
    count: int
    subjects: list[str]
    followup: bool = False
    """Sent after a quiet window: these events came after an earlier message about the same key."""

    @property
    def first(self) -> events_mod.Event:
        return self.events[0]

    @property
    def severity(self) -> events_mod.Severity:
        return max((e.severity for e in self.events), key=lambda s: s.rank)

    @property
    def resolves(self) -> bool:
        return self.first.resolves

    @property
    def incident(self) -> str:
        """PagerDuty's ``dedup_key``: the event's incident for one subject; a burst of many is its own."""
        if len(self.subjects) == 1:
            return self.first.incident
        return f"trainguard/{self.kind.value}/burst/{int(self.first.at)}"

    @property
    def summary(self) -> str:
        if self.count == 1:
            return self.first.summary
        if len(self.subjects) == 1:
            more = "since the last message" if self.followup else "together"
            return f"{self.count} {self.kind.value} events for {self.subjects[0]} {more}; first: {self.first.summary}"
        named = ", ".join(self.subjects[:SHOWN_SUBJECTS])
        if len(self.subjects) > SHOWN_SUBJECTS:
            named += f" (+{len(self.subjects) - SHOWN_SUBJECTS} more)"
        return f"{self.count} {self.kind.value} events for {len(self.subjects)} subjects ({named}); first: " \
               f"{self.first.summary}"


@dataclasses.dataclass
class _Group:
    due: float
    followup: bool
    events: list[events_mod.Event] = dataclasses.field(default_factory=list)
    count: int = 0

    def add(self, event: events_mod.Event) -> None:
        self.count += 1
        if len(self.events) < SAMPLE:
            self.events.append(event)


class Deduper:
    """The rule of the module docstring, over a caller's clock."""

    def __init__(self, settle_s: float, window_s: float) -> None:
        self.settle_s = settle_s
        self.window_s = window_s
        self._open: dict[Key, _Group] = {}
        self._quiet: dict[Key, float] = {}
        """Key -> until when its events wait for a follow-up instead of a message of their own."""
        self.merged = 0
        """Events folded into another event's message so far (a metric)."""

    def offer(self, event: events_mod.Event, now: float) -> None:
        key = (event.kind, event.subject)
        group = self._open.get(key)
        if group is None:
            quiet_until = self._quiet.get(key, 0.0)
            followup = quiet_until > now
            group = self._open[key] = _Group(due=quiet_until if followup else now + self.settle_s, followup=followup)
        else:
            self.merged += 1
        group.add(event)

    def next_due(self) -> float | None:
        return min((g.due for g in self._open.values()), default=None)

    def due(self, now: float) -> list[Message]:
        """The messages due at ``now``, one per kind (groups of one kind falling due together merge)."""
        kinds = {key[0] for key, group in self._open.items() if group.due <= now}
        ready = [(key, group) for key, group in self._open.items()
                 if group.due <= now or (key[0] in kinds and not group.followup)]
        by_kind: dict[events_mod.Kind, Message] = {}
        for key, group in sorted(ready, key=lambda item: item[1].events[0].at):
            del self._open[key]
            self._quiet[key] = now + self.window_s
            message = by_kind.get(key[0])
            if message is None:
                by_kind[key[0]] = Message(key[0], list(group.events), group.count, [key[1]], group.followup)
                continue
            self.merged += 1
            message.count += group.count
            message.subjects.append(key[1])
            message.events.extend(group.events[:max(SAMPLE - len(message.events), 0)])
            message.followup = message.followup and group.followup
        self._forget(now)
        return list(by_kind.values())

    def _forget(self, now: float) -> None:
        for key in [k for k, until in self._quiet.items() if until <= now and k not in self._open]:
            del self._quiet[key]
        while len(self._quiet) > MAX_QUIET:
            del self._quiet[next(iter(self._quiet))]
