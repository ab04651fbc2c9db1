"""The notifier's pure parts: which audit records become events, de-duplication, backoff, the bodies
Slack, PagerDuty and the webhook get, and the config file's one-line errors."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from trainguard.observe.notify import config, dedup, delivery, events, payloads
from trainguard.store import audit


def written(kind: str, payload: dict[str, Any], workload: str = "slurm/c/42", attempt: int | None = 1,
            decided_by: str = "policy-engine", at: float = 1000.0) -> audit.Written:
    return audit.Written(kind=kind, workload=workload, attempt=attempt, payload=payload, decided_by=decided_by,
                         at=at, write_s=0.001)


def event(kind: events.Kind = events.Kind.MONITOR_ADVICE, subject: str = "w1", at: float = 0.0) -> events.Event:
    return events.Event(kind=kind, subject=subject, summary=f"{kind.value} for {subject}", at=at, workload=subject)


# ---------------------------------------------------------------------- events


def test_monitor_advice_is_an_event_and_action_advice_is_not() -> None:
    advice = {"action": "requeue", "mode": "Monitor", "generation": 1, "exclusions": ["node3"], "reasons": ["xid 79"]}
    found = events.event_of(written("advice", advice))
    assert found is not None and found.kind is events.Kind.MONITOR_ADVICE
    assert "excluding node3" in found.summary and found.generation == 1 and found.severity is events.Severity.INFO
    assert events.event_of(written("advice", {**advice, "mode": "Action"})) is None
    assert events.event_of(written("advice", {**advice, "action": "none"})) is None


def test_actions_breaker_and_its_reset_share_an_incident() -> None:
    done = events.event_of(written("action", {"operation": "drain_node", "status": "done", "step": "drain_node3",
                                              "arguments": {"node": "node3"}, "generation": 1}))
    assert done is not None and done.kind is events.Kind.ACTION_DONE and "node node3" in done.summary
    assert events.event_of(written("action", {"operation": "requeue", "status": "intent"})) is None
    assert events.event_of(written("action", {"operation": "pause", "status": "done"}, workload="")) is None
    opened = events.event_of(written("action", {"operation": "breaker-open", "status": "done",
                                                "control": "actions-breaker", "reason": "cap"}))
    reset = events.event_of(written("action", {"operation": "breaker-reset", "status": "done",
                                               "control": "actions-breaker", "by": "alice"}, workload=""))
    assert opened is not None and opened.severity is events.Severity.CRITICAL and not opened.resolves
    assert reset is not None and reset.resolves and reset.incident == opened.incident


def test_outcomes_and_the_watchdog() -> None:
    limit = written("outcome", {"disposition": "Abandoned", "detail": "blocked", "generation": 2,
                                "blast_radius": {"would_block": True, "reason": "maxActionsPerHour"}})
    assert events.event_of(limit).kind is events.Kind.LIMIT_TRIPPED  # type: ignore[union-attr]
    capped = written("outcome", {"disposition": "Abandoned", "blast_radius": {"would_block": True, "breaker": "cap"}})
    assert events.event_of(capped) is None  # told by the breaker-open record
    failed = written("outcome", {"disposition": "Abandoned", "detail": "verify failed: held", "action": "requeue"})
    assert events.event_of(failed).kind is events.Kind.RECOVERY_ABANDONED  # type: ignore[union-attr]
    late = written("outcome", {"disposition": "Abandoned", "detail": "deadline passed (3 s ago) before convergence"})
    assert events.event_of(late) is None
    stuck = written("watchdog", {"reason": "deadline passed (3 s ago) before convergence", "released_hold": True})
    assert events.event_of(stuck).kind is events.Kind.RECOVERY_STUCK  # type: ignore[union-attr]
    held = written("watchdog", {"reason": "hold of ours left", "released_hold": False, "release_error": "down"})
    assert events.event_of(held).kind is events.Kind.RECOVERY_STUCK  # type: ignore[union-attr]
    assert events.event_of(written("watchdog", {"reason": "fenced: x", "fenced": True})) is None
    degraded = written("outcome", {"disposition": "Converged", "blast_radius": {"refused_drains": ["n1"]}})
    assert events.event_of(degraded).kind is events.Kind.LIMIT_TRIPPED  # type: ignore[union-attr]
    assert events.event_of(written("outcome", {"disposition": "Monitored"})) is None
    assert events.event_of(written("anomaly", {"symptom": "crash"})) is None


# ---------------------------------------------------------------------- dedup


def test_a_cascade_of_one_key_is_one_message_with_its_count() -> None:
    d = dedup.Deduper(settle_s=5, window_s=60)
    for i in range(20):
        d.offer(event(at=i * 0.1), now=i * 0.1)
    assert d.due(4.9) == []
    [message] = d.due(5.0)
    assert message.count == 20 and message.subjects == ["w1"] and len(message.events) == dedup.SAMPLE
    assert message.summary.startswith("20 monitor-advice events for w1 together")
    assert d.merged == 19


def test_a_burst_over_many_workloads_is_one_message_and_kinds_stay_apart() -> None:
    d = dedup.Deduper(settle_s=2, window_s=60)
    for i in range(8):
        d.offer(event(subject=f"w{i}", at=0.5), now=0.5)
    d.offer(event(events.Kind.BREAKER_OPEN, subject="actions-breaker", at=0.6), now=0.6)
    messages = {m.kind: m for m in d.due(3.0)}
    assert set(messages) == {events.Kind.MONITOR_ADVICE, events.Kind.BREAKER_OPEN}
    burst = messages[events.Kind.MONITOR_ADVICE]
    assert burst.count == 8 and len(burst.subjects) == 8 and "(+3 more)" in burst.summary
    assert burst.incident.startswith("trainguard/monitor-advice/burst/")
    assert messages[events.Kind.BREAKER_OPEN].incident == "trainguard/breaker-open/actions-breaker"


def test_after_a_message_the_key_is_quiet_and_then_one_followup_counts_the_rest() -> None:
    d = dedup.Deduper(settle_s=1, window_s=60)
    d.offer(event(at=0), now=0)
    assert len(d.due(1)) == 1
    for t in (10, 20, 30):
        d.offer(event(at=t), now=t)
    assert d.due(59) == [] and d.next_due() == 61
    [followup] = d.due(61)
    assert followup.followup and followup.count == 3 and "since the last message" in followup.summary
    d.offer(event(at=200), now=200)  # the window has passed: a new cascade
    assert d.next_due() == 201


# ---------------------------------------------------------------------- backoff


def test_backoff_doubles_up_to_its_ceiling_with_jitter() -> None:
    rng = random.Random(7)
    delays = [delivery.backoff(n, 1.0, 30.0, rng) for n in range(1, 9)]
    for n, delay in enumerate(delays, start=1):
        full = min(2.0 ** (n - 1), 30.0)
        assert full * 0.5 <= delay < full
    assert len({round(d, 6) for d in delays}) == len(delays)


# ---------------------------------------------------------------------- payloads


def message(kind: events.Kind = events.Kind.RECOVERY_ABANDONED, count: int = 1) -> dedup.Message:
    e = events.Event(kind=kind, subject="slurm/c/42", summary="slurm/c/42 attempt 1: abandoned " + "x" * 2000,
                     at=1_700_000_000.0, workload="slurm/c/42", attempt=1, generation=1)
    return dedup.Message(kind, [e], count, ["slurm/c/42"])


def test_pagerduty_events_v2_shape() -> None:
    body = payloads.pagerduty(message(), "gpu-a", "KEY")
    assert body["routing_key"] == "KEY" and body["event_action"] == "trigger"
    assert body["dedup_key"] == "trainguard/recovery-abandoned/slurm/c/42"
    assert body["payload"]["severity"] == "error" and body["payload"]["source"] == "gpu-a"
    assert len(body["payload"]["summary"]) == payloads.SUMMARY_MAX
    assert body["payload"]["timestamp"] == "2023-11-14T22:13:20+00:00"
    resolve = payloads.pagerduty(message(events.Kind.BREAKER_RESET), "gpu-a", "KEY")
    assert resolve == {"routing_key": "KEY", "dedup_key": "trainguard/breaker-open/slurm/c/42",
                       "event_action": "resolve"}


def test_slack_incoming_webhook_shape() -> None:
    body = payloads.slack(message(count=3), "gpu-a")
    assert body["text"].startswith(":x: [gpu-a] 3 recovery-abandoned events")
    header, section, context = body["blocks"]
    assert header["type"] == "header" and header["text"]["type"] == "plain_text"
    assert header["text"]["text"] == "Trainguard recovery-abandoned ×3"
    assert section["type"] == "section" and len(section["text"]["text"]) <= payloads.SLACK_SECTION_MAX
    assert context["type"] == "context"


def test_webhook_shape() -> None:
    body = payloads.webhook(message(), "gpu-a")
    assert body["version"] == 1 and body["kind"] == "recovery-abandoned" and body["action"] == "trigger"
    assert body["events"][0]["workload"] == "slurm/c/42" and body["events"][0]["at"].endswith("+00:00")


# ---------------------------------------------------------------------- config


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "key").write_text("R0UTING\n")
    path = tmp_path / "notify.yaml"
    path.write_text(text)
    return path


def test_a_good_config_and_its_defaults(tmp_path: Path) -> None:
    loaded = config.load(write(tmp_path, f"source: gpu-a\ntargets:\n  - {{name: pd, type: pagerduty, "
                                         f"routing_key_file: {tmp_path / 'key'}}}\n"))
    [target] = loaded.targets
    assert isinstance(target, config.PagerDutyTarget) and target.min_severity is events.Severity.ERROR
    assert target.wants(events.Kind.RECOVERY_STUCK, events.Severity.ERROR)
    assert not target.wants(events.Kind.MONITOR_ADVICE, events.Severity.INFO)
    assert target.wants(events.Kind.BREAKER_RESET, events.Severity.INFO)  # resolves a kind it gets
    assert loaded.dedup.settle_seconds == 5 and loaded.delivery.max_attempts == 6


@pytest.mark.parametrize(("text", "error"), [
    ("targets: [\n", "notify config"),
    ("targets: []\n", "targets: List should have at least 1 item"),
    ("[1, 2]\n", "expected a mapping"),
    ("targets:\n  - {name: a, type: pagerduty, routing_key: abc}\n", "give routing_key_file"),
    ("targets:\n  - {name: a, type: slack, webhook_url: https://x}\n", "give webhook_url_file"),
    ("targets:\n  - {name: a, type: email}\n", "does not match any of the expected tags"),
    ("targets:\n  - {name: a, type: webhook, url_file: /nonexistent/url}\n", "target a: cannot read /nonexistent"),
    ("targets:\n  - {name: a, type: webhook, url_file: KEY, events: [boom]}\n", "events.0"),
    ("targets:\n  - {name: a, type: webhook, url_file: KEY}\n  - {name: a, type: webhook, url_file: KEY}\n",
     "target names must be unique: a"),
    ("targets:\n  - {name: a, type: webhook, url_file: KEY}\ntargets: []\n", "duplicate key 'targets'"),
    ("targets:\n  - {name: a, type: webhook, url_file: KEY}\ndelivery: {max_attempts: 0}\n", "delivery.max_attempts"),
])
def test_config_errors_are_one_line(tmp_path: Path, text: str, error: str) -> None:
    path = write(tmp_path, text.replace("KEY", str(tmp_path / "key")))
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    assert error in str(caught.value) and "\n" not in str(caught.value)


def test_an_empty_secret_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    path = write(tmp_path, f"targets:\n  - {{name: a, type: slack, webhook_url_file: {tmp_path / 'empty'}}}\n")
    with pytest.raises(config.ConfigError, match="is empty"):
        config.load(path)


def test_a_group_falling_due_takes_the_open_groups_of_its_kind_along() -> None:
    d = dedup.Deduper(settle_s=5, window_s=60)
    d.offer(event(subject="w1", at=0), now=0)
    d.offer(event(subject="w2", at=3), now=3)  # not due until 8: goes with w1 at 5
    d.offer(event(events.Kind.ACTION_DONE, subject="w3", at=4), now=4)  # another kind: waits for its own time
    [message] = d.due(5)
    assert message.kind is events.Kind.MONITOR_ADVICE and message.subjects == ["w1", "w2"]
    assert [m.kind for m in d.due(9)] == [events.Kind.ACTION_DONE]


def test_a_node_held_for_repair_is_an_event_about_the_node() -> None:
    held = events.event_of(written("action", {"operation": "node-held", "status": "done", "node": "node7",
                                              "state": "held-for-repair", "reason": "ECC", "by": "alice"},
                                   workload="", attempt=None, decided_by="cli"))
    assert held is not None and held.kind is events.Kind.NODE_HELD and held.severity is events.Severity.WARNING
    assert (held.subject, held.node) == ("node7", "node7") and "alice" in held.summary and "ECC" in held.summary
    repeat = events.event_of(written("action", {"operation": "node-repeat-offender", "status": "done",
                                                "node": "node7", "reason": "taken out again", "by": "trainguard"}))
    assert repeat is not None and repeat.kind is events.Kind.NODE_HELD and repeat.incident == held.incident
    assert events.event_of(written("action", {"operation": "node-cleared", "status": "done", "node": "node7"})) is None
