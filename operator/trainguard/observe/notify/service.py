"""The notifier: an audit observer that queues events and a task that de-duplicates and sends them.

Place: beside the engine's metrics, on the audit store's observers (``store.audit.AuditObserver``):
told each record after its transaction committed, so a message never reports what was rolled back.
``audit_written`` runs inside the loop's commit and must be quick and never raise: it classifies
the record (``events``), puts the event on a bounded queue without waiting, and returns. A full
queue drops the event, counts it (``trainguard_notification_events_dropped_total{reason="queue_full"}``)
and logs a line (at most one a minute, with the count); it never raises into the engine.

The worker task (started with the first event, on the loop that commits) feeds the ``dedup.Deduper``
and hands each message due to the outbox of every target that wants it (``delivery.Outbox``: one
task per target, bounded too). ``close`` sends what is due and waits a little for the outboxes; a
process that ends without ``close`` loses the messages not sent yet (the audit log has every record).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Callable
from typing import Final

import aiohttp
from prometheus_client import CollectorRegistry, Counter

from trainguard.model import tasks
from trainguard.observe.notify import config as config_mod
from trainguard.observe.notify import dedup, delivery, events
from trainguard.store import audit

logger = logging.getLogger("trainguard.notify")

DROP_LOG_EVERY_S: Final = 60.0


class NotifyMetrics:
    """The notifier's counters, one set per registry (a second notifier on it reuses them)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.messages = Counter("trainguard_notifications", "Notification messages by target and outcome (sent: "
                                "the receiver took it; failed: refused, or given up after the retries)",
                                ["target", "outcome"], registry=registry)
        self.retries = Counter("trainguard_notification_retries", "Retried deliveries, by target", ["target"],
                               registry=registry)
        self.dropped = Counter("trainguard_notification_events_dropped", "Events or messages dropped because a "
                               "queue was full (queue_full: the notifier's; outbox_full: a target's)", ["reason"],
                               registry=registry)
        self.merged = Counter("trainguard_notification_events_merged", "Events folded into another event's "
                              "message by de-duplication", registry=registry)
        for reason in ("queue_full", "outbox_full"):
            self.dropped.labels(reason)

    @classmethod
    def shared(cls, registry: CollectorRegistry) -> NotifyMetrics:
        found = _BY_REGISTRY.get(registry)
        if found is None:
            found = _BY_REGISTRY[registry] = cls(registry)
        return found

    def sent(self, target: str) -> None:
        self.messages.labels(target, "sent").inc()

    def failed(self, target: str) -> None:
        self.messages.labels(target, "failed").inc()

    def retried(self, target: str) -> None:
        self.retries.labels(target).inc()


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, NotifyMetrics] = weakref.WeakKeyDictionary()


class Notifier:
    """See the module docstring. ``clock``: the de-duplication's time (monotonic seconds)."""

    def __init__(self, config: config_mod.NotifyConfig, registry: CollectorRegistry | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.metrics = NotifyMetrics.shared(registry if registry is not None else CollectorRegistry())
        self._clock = clock
        self._queue: asyncio.Queue[events.Event] | None = None
        self._dedup = dedup.Deduper(config.dedup.settle_seconds, config.dedup.window_seconds)
        self._merged_counted = 0
        self._session: aiohttp.ClientSession | None = None
        self._outboxes = [delivery.Outbox(t, config.delivery, config.source, self._client, self.metrics)
                          for t in config.targets]
        self._tasks: set[asyncio.Task[None]] = set()
        self._dropped_unlogged = 0
        self._drop_logged_at = -DROP_LOG_EVERY_S

    # ------------------------------------------------------------------ the audit observer

    def audit_written(self, record: audit.Written) -> None:
        event = events.event_of(record)
        if event is not None:
            self.offer(event)

    def offer(self, event: events.Event) -> None:
        """Queue ``event`` without waiting; dropped (counted, logged) when the queue is full or no loop runs."""
        if self._queue is None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                self._drop(event, "no event loop runs")
                return
            self._queue = asyncio.Queue(self.config.delivery.queue_size)
            tasks.spawn(self._work(), "notifier", self._tasks)
            for outbox in self._outboxes:
                tasks.spawn(outbox.run(), f"notify target {outbox.target.name}", self._tasks)
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self._drop(event, "the queue is full")

    def _drop(self, event: events.Event, why: str) -> None:
        self.metrics.dropped.labels("queue_full").inc()
        self._dropped_unlogged += 1
        now = self._clock()
        if now - self._drop_logged_at >= DROP_LOG_EVERY_S:
            logger.warning("notifier: %s: dropped %d event(s), latest a %s for %s (the audit log has them all)",
                           why, self._dropped_unlogged, event.kind.value, event.subject)
            self._dropped_unlogged, self._drop_logged_at = 0, now

    # ------------------------------------------------------------------ the worker

    async def _work(self) -> None:
        assert self._queue is not None
        try:
            while True:
                due = self._dedup.next_due()
                timeout = None if due is None else max(due - self._clock(), 0.0)
                try:
                    event = await asyncio.wait_for(self._queue.get(), timeout)
                except TimeoutError:
                    pass
                else:
                    self._dedup.offer(event, self._clock())
                self._dispatch(self._dedup.due(self._clock()))
        finally:
            if self._session is not None:
                await self._session.close()

    def _dispatch(self, messages: list[dedup.Message]) -> None:
        if self._dedup.merged > self._merged_counted:
            self.metrics.merged.inc(self._dedup.merged - self._merged_counted)
            self._merged_counted = self._dedup.merged
        for message in messages:
            for outbox in self._outboxes:
                if not outbox.target.wants(message.kind, message.severity):
                    continue
                if not outbox.put(message):
                    self.metrics.dropped.labels("outbox_full").inc()
                    logger.warning("notify target %s: its outbox is full (the target is slow or down); a %s "
                                   "message was dropped", outbox.target.name, message.kind.value)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(headers={"User-Agent": "trainguard-notifier"})
        return self._session

    async def flush(self, timeout_s: float = 10.0) -> None:
        """Send every queued event now (settle and quiet windows cut short), wait up to ``timeout_s`` for the
        outboxes; for a clean stop and for tests."""
        if self._queue is None:
            return
        while not self._queue.empty():
            self._dedup.offer(self._queue.get_nowait(), self._clock())
        self._dispatch(self._dedup.due(float("inf")))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(o.idle() for o in self._outboxes)), timeout_s)

    async def close(self, timeout_s: float = 5.0) -> None:
        """``flush``, then stop the tasks and close the HTTP session."""
        await self.flush(timeout_s)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
