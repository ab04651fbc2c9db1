"""Async argv command runner for the CLI scheduler transports (slurm-local, slurm-ssh).

The Slurm adapters never build shell strings: they hand an argv list to a ``Runner``.
``LocalRunner`` resolves each allowed binary once, at construction, with ``shutil.which``
(a missing ``scontrol`` is a clear error at start-up, not at the first recovery), runs it
with ``asyncio.create_subprocess_exec`` under a per-call timeout, and counts calls and
failures per binary (NVRx ``smonsvc/slurm.py`` keeps the same counters). ``slurm_ssh``
provides a second ``Runner`` with the same contract over SSH.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from trainguard.schedulers import base

DEFAULT_TIMEOUT = 30.0
"""Seconds one scheduler command may take. scontrol answers in milliseconds; a slurmctld that
is restarting may take ~10 s; past 30 s the caller is better served by an error."""

SLURM_BINARIES = ("scontrol", "squeue", "scancel", "sbatch")
"""The commands the Slurm CLI transport runs; nothing else may be executed. ``sbatch`` submits only the
site's validation check (``slurm_commands.argv_submit_check``), part of every Slurm client install."""


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What one command printed and returned; ``stdout``/``stderr`` decoded with replacement."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def message(self) -> str:
        """The scheduler's own words, for errors: stderr, else stdout, stripped."""
        return (self.stderr.strip() or self.stdout.strip())[:2000]


@dataclass(slots=True)
class CallStats:
    """Call and failure counters per binary (failure = non-zero exit, timeout or spawn error)."""

    calls: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)


class Runner(Protocol):
    """Runs one argv list and returns its result; never raises for a non-zero exit."""

    stats: CallStats

    async def run(self, argv: Sequence[str]) -> CommandResult: ...

    async def close(self) -> None: ...


class LocalRunner:
    """Runs allowed binaries on this host, without a shell.

    ``env`` is added to this process's environment (e.g. ``SLURM_CONF``), so a private
    cluster can be addressed without changing the operator's own environment.
    """

    def __init__(
        self,
        binaries: Iterable[str] = SLURM_BINARIES,
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        path: str | None = None,
    ) -> None:
        self._env = {**os.environ, **(env or {})}
        search = path if path is not None else self._env.get("PATH")
        self._paths: dict[str, str] = {}
        for name in binaries:
            found = shutil.which(name, path=search)
            if found is None:
                raise base.SchedulerError(f"{name!r} not found on PATH ({search or ''}); is Slurm's client installed?")
            self._paths[name] = found
        self._timeout = timeout
        self.stats = CallStats()

    async def run(self, argv: Sequence[str]) -> CommandResult:
        if not argv or argv[0] not in self._paths:
            raise base.SchedulerError(f"command {argv[:1]!r} is not one this runner may execute")
        name = argv[0]
        self.stats.calls[name] += 1
        limit = self._timeout
        try:
            proc = await asyncio.create_subprocess_exec(
                self._paths[name],
                *argv[1:],
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env,
            )
        except OSError as exc:
            self.stats.failures[name] += 1
            raise base.SchedulerError(f"cannot start {name}: {exc}") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(), limit)
        except TimeoutError:
            self.stats.failures[name] += 1
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise base.SchedulerError(f"{name} did not answer within {limit:g} s") from None
        except asyncio.CancelledError:
            # The caller stopped acting (e.g. this replica lost its leadership): the command must not
            # carry on behind its back and change the job after the new leader looked at it.
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise
        rc = proc.returncode if proc.returncode is not None else -1
        if rc != 0:
            self.stats.failures[name] += 1
        return CommandResult(
            tuple(argv), rc, out.decode("utf-8", errors="replace"), err.decode("utf-8", errors="replace")
        )

    async def close(self) -> None:
        return None
