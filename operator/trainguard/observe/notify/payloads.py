"""The bodies each kind of target accepts, built from one ``dedup.Message``. Pure.

- ``webhook``: our own JSON shape (``version`` 1; docs/notifications.md), every field a program needs;
- ``slack``: an incoming-webhook body: ``text`` (the notification's fallback) and Block Kit ``blocks``;
- ``pagerduty``: an Events API v2 event: ``routing_key``, ``event_action`` (``trigger``, or ``resolve``
  for a kind that ends an incident), ``dedup_key`` (the incident: a trigger and its resolve share it),
  ``payload.summary`` / ``source`` / ``severity`` (a resolve carries no payload).
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Final

from trainguard.observe.notify import dedup

SUMMARY_MAX: Final = 1024
"""PagerDuty's limit on ``payload.summary``; Slack's header and section limits are below."""
SLACK_SECTION_MAX: Final = 3000


def iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat()


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def webhook(message: dedup.Message, source: str) -> dict[str, Any]:
    first = message.first
    return {
        "version": 1, "source": source, "kind": message.kind.value, "severity": message.severity.value,
        "action": "resolve" if message.resolves else "trigger", "dedup_key": message.incident,
        "summary": message.summary, "count": message.count, "subjects": list(message.subjects),
        "followup": message.followup, "first_at": iso(first.at), "last_at": iso(message.events[-1].at),
        "events": [{**dataclasses.asdict(e), "kind": e.kind.value, "at": iso(e.at)} for e in message.events],
    }


_EMOJI: Final = {"info": ":information_source:", "warning": ":warning:", "error": ":x:", "critical": ":rotating_light:"}


def slack(message: dedup.Message, source: str) -> dict[str, Any]:
    first = message.first
    title = f"Trainguard {message.kind.value}" + (f" ×{message.count}" if message.count > 1 else "")
    fields = [f"*Severity*\n{message.severity.value}", f"*Source*\n{source}"]
    if first.workload:
        fields.append(f"*Workload*\n{_clip(first.workload, 200)}")
    if len(message.subjects) > 1:
        fields.append(f"*Subjects*\n{len(message.subjects)}")
    return {
        "text": _clip(f"{_EMOJI[message.severity.value]} [{source}] {message.summary}", SLACK_SECTION_MAX),
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": _clip(title, 150)}},
            {"type": "section", "text": {"type": "mrkdwn", "text": _clip(message.summary, SLACK_SECTION_MAX)},
             "fields": [{"type": "mrkdwn", "text": f} for f in fields]},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": f"{iso(first.at)} · dedup key "
                                              f"`{_clip(message.incident, 200)}`"}]},
        ],
    }


def pagerduty(message: dedup.Message, source: str, routing_key: str) -> dict[str, Any]:
    body: dict[str, Any] = {"routing_key": routing_key, "dedup_key": message.incident,
                            "event_action": "resolve" if message.resolves else "trigger"}
    if message.resolves:
        return body
    first = message.first
    body["payload"] = {
        "summary": _clip(message.summary, SUMMARY_MAX), "source": source, "severity": message.severity.value,
        "timestamp": iso(first.at), "component": "trainguard", "group": first.workload or first.subject,
        "class": message.kind.value,
        "custom_details": {"count": message.count, "subjects": message.subjects[:50], "first": first.summary,
                           "detail": first.detail},
    }
    return body
