"""The notifier end to end: records committed by a real audit store (SQLite), delivered over HTTP to
real aiohttp receivers started here (the receiving end of a webhook, not a fake of our code): the Slack,
PagerDuty and webhook bodies arrive; a receiver that fails twice gets the message on the third try; a
receiver that is down costs the loop nothing and is counted; a full queue is counted, never raised."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from trainguard.act import switch
from trainguard.model import advice, vocab
from trainguard.observe import notify
from trainguard.observe.notify import events, service
from trainguard.store import audit, database

pytestmark = [pytest.mark.integration]


@dataclass
class Receiver:
    url: str
    got: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    failures_left: int = 0
    calls: int = 0

    async def wait(self, path: str, count: int = 1) -> list[dict[str, Any]]:
        deadline = time.monotonic() + 20
        while len(self.got.get(path, [])) < count:
            assert time.monotonic() < deadline, f"{path}: got {self.got}"
            await asyncio.sleep(0.05)
        return self.got[path]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    state = Receiver("")

    async def take(request: web.Request) -> web.Response:
        state.calls += 1
        if state.failures_left > 0:
            state.failures_left -= 1
            return web.Response(status=503, text="try later")
        state.got.setdefault(request.path, []).append(await request.json())
        return web.json_response({"status": "success"}, status=202 if request.path == "/pd" else 200)

    app = web.Application()
    app.router.add_post("/{name}", take)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    state.url = f"http://{host}:{port}"
    yield state
    await runner.cleanup()


def secret(tmp_path: Path, name: str, value: str) -> Path:
    path = tmp_path / name
    path.write_text(value + "\n")
    return path


def notify_config(tmp_path: Path, targets: list[dict[str, Any]], settle: float = 0.2,
                  **delivery: Any) -> notify.NotifyConfig:
    return notify.NotifyConfig.model_validate({
        "source": "test-cluster", "targets": targets, "dedup": {"settle_seconds": settle, "window_seconds": 60},
        "delivery": {"initial_backoff_seconds": 0.05, "max_backoff_seconds": 0.2, "timeout_seconds": 2,
                     **delivery}})


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[audit.AuditStore]:
    opened = await database.open_store(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    yield opened
    await opened.close()


async def monitor_advice(store: audit.AuditStore, workload: str, generation: int = 1) -> None:
    await store.record_advice(advice.Advice(workload=workload, attempt=1, generation=generation,
                                            action=vocab.AdviceAction.REQUEUE, exclude_nodes=["node3"],
                                            reasons=["xid 79 on node3"], mode=vocab.Mode.MONITOR), at=time.time())


def counter(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_slack_pagerduty_and_webhook_get_their_bodies(store: audit.AuditStore, receiver: Receiver,
                                                          tmp_path: Path) -> None:
    registry = CollectorRegistry()
    config = notify_config(tmp_path, [
        {"name": "slack", "type": "slack", "webhook_url_file": str(secret(tmp_path, "s", f"{receiver.url}/slack"))},
        {"name": "pd", "type": "pagerduty", "routing_key_file": str(secret(tmp_path, "k", "ROUTING-KEY")),
         "endpoint": f"{receiver.url}/pd"},
        {"name": "hook", "type": "webhook", "url_file": str(secret(tmp_path, "h", f"{receiver.url}/hook")),
         "bearer_token_file": str(secret(tmp_path, "t", "T0KEN"))},
    ])
    notifier = notify.attach(store, config, registry)
    assert notifier is not None and notifier in store.observers
    for n in range(3):  # a cascade: three generations of one workload in a moment -> one message
        await monitor_advice(store, "slurm/c/42", generation=n + 1)
    await store.record_watchdog(workload="slurm/c/42", attempt=1, generation=3, at=time.time(),
                                payload={"reason": "deadline passed (1 s ago) before convergence",
                                         "released_hold": True})
    await store.set_control(switch.BREAKER, {"open": True, "reason": "cap"}, by="trainguard", channel="cli",
                            at=time.time(), payload={"operation": "breaker-open", "status": "done", "reason": "cap"})
    await store.set_control(switch.BREAKER, {"open": False}, by="alice", channel="cli", at=time.time(),
                            payload={"operation": "breaker-reset", "status": "done", "reason": "checked"})

    slack = await receiver.wait("/slack", 4)
    by_kind = {m["blocks"][0]["text"]["text"]: m for m in slack}
    assert set(by_kind) == {"Trainguard monitor-advice ×3", "Trainguard recovery-stuck", "Trainguard breaker-open",
                            "Trainguard breaker-reset"}
    assert by_kind["Trainguard monitor-advice ×3"]["text"].startswith(":information_source: [test-cluster] 3 "
                                                                         "monitor-advice events for slurm/c/42")
    pd = await receiver.wait("/pd", 3)
    assert [(m["event_action"], m["dedup_key"]) for m in pd] == [
        ("trigger", "trainguard/recovery-stuck/slurm/c/42"), ("trigger", "trainguard/breaker-open/actions-breaker"),
        ("resolve", "trainguard/breaker-open/actions-breaker")]
    assert pd[0]["routing_key"] == "ROUTING-KEY" and pd[0]["payload"]["severity"] == "error"
    assert pd[0]["payload"]["source"] == "test-cluster" and pd[1]["payload"]["severity"] == "critical"
    hook = await receiver.wait("/hook", 4)
    advice_message = next(m for m in hook if m["kind"] == "monitor-advice")
    assert advice_message["count"] == 3 and advice_message["events"][0]["detail"]["exclusions"] == ["node3"]
    await notifier.close()
    assert counter(registry, "trainguard_notifications_total", target="pd", outcome="sent") == 3
    assert counter(registry, "trainguard_notification_events_merged_total") == 2


async def test_a_receiver_that_fails_twice_gets_the_message_on_the_third_try(
        store: audit.AuditStore, receiver: Receiver, tmp_path: Path) -> None:
    registry = CollectorRegistry()
    receiver.failures_left = 2
    notifier = notify.attach(store, notify_config(tmp_path, [
        {"name": "hook", "type": "webhook", "url_file": str(secret(tmp_path, "h", f"{receiver.url}/hook"))}]),
        registry)
    assert notifier is not None
    await monitor_advice(store, "slurm/c/7")
    [message] = await receiver.wait("/hook")
    assert message["kind"] == "monitor-advice" and receiver.calls == 3
    await notifier.close()
    assert counter(registry, "trainguard_notification_retries_total", target="hook") == 2
    assert counter(registry, "trainguard_notifications_total", target="hook", outcome="sent") == 1


async def test_a_receiver_that_is_down_blocks_nothing_and_is_counted(
        store: audit.AuditStore, receiver: Receiver, tmp_path: Path) -> None:
    registry = CollectorRegistry()
    down = "http://127.0.0.1:9/hook"  # discard port: nothing listens, connections are refused
    notifier = notify.attach(store, notify_config(tmp_path, [
        {"name": "down", "type": "webhook", "url_file": str(secret(tmp_path, "d", down))},
        {"name": "up", "type": "webhook", "url_file": str(secret(tmp_path, "u", f"{receiver.url}/hook"))},
    ], settle=3, max_attempts=3), registry)
    assert notifier is not None
    started = time.monotonic()
    for n in range(20):
        await monitor_advice(store, f"slurm/c/{n}")
    assert time.monotonic() - started < 10  # commits never wait for a receiver
    deadline = time.monotonic() + 20  # the other target is not held back; the cascade comes in few messages
    while sum(m["count"] for m in receiver.got.get("/hook", [])) < 20:
        assert time.monotonic() < deadline, receiver.got
        await asyncio.sleep(0.05)
    assert len(receiver.got["/hook"]) < 20
    deadline = time.monotonic() + 20
    while counter(registry, "trainguard_notifications_total", target="down", outcome="failed") < 1:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    assert counter(registry, "trainguard_notification_retries_total", target="down") == 2
    await notifier.close()


async def test_a_full_queue_drops_and_counts_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                        receiver: Receiver) -> None:
    registry = CollectorRegistry()
    notifier = service.Notifier(notify_config(tmp_path, [
        {"name": "hook", "type": "webhook", "url_file": str(secret(tmp_path, "h", f"{receiver.url}/hook"))}],
        queue_size=5), registry)
    make: Callable[[int], events.Event] = lambda n: events.Event(  # noqa: E731
        kind=events.Kind.ACTION_DONE, subject=f"w{n}", summary="done", at=time.time())
    for n in range(50):  # without yielding to the loop: the worker cannot drain meanwhile
        notifier.offer(make(n))
    assert counter(registry, "trainguard_notification_events_dropped_total", reason="queue_full") == 45
    assert "dropped 1 event(s)" in caplog.text
    await notifier.close()
    [message] = await receiver.wait("/hook")
    assert message["count"] == 5


def test_a_bad_notify_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "notify.yaml"
    bad.write_text("targets:\n  - {name: pd, type: pagerduty, routing_key: inline}\n")
    done = subprocess.run([sys.executable, "-m", "trainguard.cli.main", "run", "--scheduler", "slurm-local",
                           "--home", str(tmp_path), "--notify-config", str(bad), "--once"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "give routing_key_file" in lines[0], done.stderr
