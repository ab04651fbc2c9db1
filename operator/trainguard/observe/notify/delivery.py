"""Sending one message to one target over HTTP (aiohttp), with retries: backoff, jitter, a limit.

Place: the last step of the notifier (``observe.notify.service`` hands each target's messages to its
``Outbox``). Each target has its own outbox and task, so one that is down (and backing off) never
delays another, and the audit loop never waits for any of them.

Retried: connection errors, timeouts, HTTP 429 and 5xx (a 429's ``Retry-After`` is honoured up to the
backoff's ceiling). Not retried: any other 4xx (the receiver refuses the body or the key: retrying
cannot help; logged with the receiver's answer). Gave up after ``max_attempts``: logged, counted.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
from collections.abc import Callable
from typing import Any

import aiohttp

from trainguard.observe.notify import config as config_mod
from trainguard.observe.notify import dedup, payloads

logger = logging.getLogger("trainguard.notify")


def backoff(attempt: int, initial_s: float, ceiling_s: float, rng: random.Random) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based): ``initial * 2^(attempt-1)``
    up to ``ceiling``, times a jitter in [0.5, 1) so that several senders do not retry in lockstep."""
    return min(initial_s * 2.0 ** (attempt - 1), ceiling_s) * rng.uniform(0.5, 1.0)


class _Retry(Exception):
    def __init__(self, why: str, after_s: float | None = None) -> None:
        super().__init__(why)
        self.after_s = after_s


class Outbox:
    """One target's bounded queue of messages and the task that sends them in order."""

    def __init__(self, target: config_mod.WebhookTarget | config_mod.SlackTarget | config_mod.PagerDutyTarget,
                 settings: config_mod.Delivery, source: str, session: Callable[[], aiohttp.ClientSession],
                 counters: Any, *, rng: random.Random | None = None,
                 sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        self.target = target
        self.settings = settings
        self.source = source
        self._session = session
        self._counters = counters
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._queue: collections.deque[dedup.Message] = collections.deque()
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def put(self, message: dedup.Message) -> bool:
        """Queue ``message``; False (the caller counts and logs it) when the outbox is full."""
        if len(self._queue) >= self.settings.outbox_size:
            return False
        self._queue.append(message)
        self._idle.clear()
        self._ready.set()
        return True

    async def idle(self) -> None:
        """Return once nothing is queued or being sent."""
        await self._idle.wait()

    async def run(self) -> None:
        """Send forever (until cancelled), oldest first."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._queue:
                await self.deliver(self._queue.popleft())
            self._idle.set()

    async def deliver(self, message: dedup.Message) -> bool:
        """Send ``message`` with retries; True when the target took it."""
        name = self.target.name
        for attempt in range(1, self.settings.max_attempts + 1):
            try:
                await self._post(message)
            except _Retry as exc:
                if attempt == self.settings.max_attempts:
                    logger.warning("notify target %s: gave up on a %s message after %d attempts: %s", name,
                                   message.kind.value, attempt, exc)
                    break
                self._counters.retried(name)
                delay = backoff(attempt, self.settings.initial_backoff_seconds, self.settings.max_backoff_seconds,
                                self._rng)
                if exc.after_s is not None:
                    delay = min(max(delay, exc.after_s), self.settings.max_backoff_seconds)
                logger.debug("notify target %s: attempt %d failed (%s); again in %.1f s", name, attempt, exc, delay)
                await self._sleep(delay)
            except _Refused as exc:
                logger.warning("notify target %s refused a %s message: %s", name, message.kind.value, exc)
                break
            except config_mod.ConfigError as exc:
                logger.warning("notify target %s: %s", name, exc)
                break
            else:
                self._counters.sent(name)
                return True
        self._counters.failed(name)
        return False

    async def _post(self, message: dedup.Message) -> None:
        url, body, headers = self._request(message)
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout_seconds)
        try:
            async with self._session().post(url, json=body, headers=headers, timeout=timeout) as response:
                text = (await response.text())[:300]
                if response.status < 300:
                    return
                if response.status == 429 or response.status >= 500:
                    raise _Retry(f"HTTP {response.status}: {text}", _retry_after(response.headers.get("Retry-After")))
                raise _Refused(f"HTTP {response.status}: {text}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _Retry(f"{type(exc).__name__}: {exc}") from exc

    def _request(self, message: dedup.Message) -> tuple[str, dict[str, Any], dict[str, str]]:
        target = self.target
        if isinstance(target, config_mod.PagerDutyTarget):
            key = config_mod.read_secret(target.routing_key_file)
            return target.endpoint, payloads.pagerduty(message, self.source, key), {}
        if isinstance(target, config_mod.SlackTarget):
            return config_mod.read_secret(target.webhook_url_file), payloads.slack(message, self.source), {}
        headers = {}
        if target.bearer_token_file is not None:
            headers["Authorization"] = f"Bearer {config_mod.read_secret(target.bearer_token_file)}"
        return config_mod.read_secret(target.url_file), payloads.webhook(message, self.source), headers


class _Refused(Exception):
    """The receiver answered with a 4xx other than 429: not retried."""


def _retry_after(value: str | None) -> float | None:
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None  # an HTTP date: the backoff decides
