"""The ``slurm-ssh://user@host[:port]`` transport: Slurm's commands on a login node, over SSH.

Same ``slurm_local.SlurmCommandScheduler`` (same parsing, same "already done" rules), with an
``SshRunner`` instead of the local one. The remote side runs a shell, so every command line
is built with ``shlex.join`` from an argv list whose job ids and node names were already
checked against strict patterns (``slurm_cli.JOB_ID_RE`` / ``NODE_RE``); nothing is
interpolated unquoted. Remote environment (e.g. ``SLURM_CONF``) is passed as quoted
``env NAME=value`` arguments, because many sshd configs refuse ``SetEnv``.
One connection is kept open and reopened once if it dropped.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import asyncssh

from trainguard.schedulers import base, runner, slurm_local

logger = logging.getLogger(__name__)

_ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_USER_RE = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")


class SshRunner:
    """Runs allowed Slurm commands on ``host`` over one reused SSH connection."""

    def __init__(
        self,
        host: str,
        *,
        port: int = 22,
        username: str | None = None,
        client_keys: Sequence[str] | None = None,
        known_hosts: str | None = None,
        remote_env: Mapping[str, str] | None = None,
        binaries: Sequence[str] = runner.SLURM_BINARIES,
        timeout: float = runner.DEFAULT_TIMEOUT,
    ) -> None:
        if username is not None and not _USER_RE.match(username):
            raise base.SchedulerError(f"not a valid ssh user name: {username!r}")
        for name in remote_env or {}:
            if not _ENV_NAME_RE.match(name):
                raise base.SchedulerError(f"not a valid environment variable name: {name!r}")
        self.host, self.port, self.username = host, port, username
        self._client_keys = list(client_keys) if client_keys is not None else None
        self._known_hosts = known_hosts
        self._env = dict(remote_env or {})
        self._binaries = frozenset(binaries)
        self._timeout = timeout
        self._conn: Any = None
        self._lock = asyncio.Lock()
        self.stats = runner.CallStats()

    def command_line(self, argv: Sequence[str]) -> str:
        """The remote shell line: every word quoted, environment first through ``env``."""
        if not argv or argv[0] not in self._binaries:
            raise base.SchedulerError(f"command {list(argv[:1])!r} is not one this runner may execute")
        prefix = ["env", *(f"{k}={v}" for k, v in sorted(self._env.items()))] if self._env else []
        return shlex.join([*prefix, *argv])

    async def _connect(self) -> Any:
        async with self._lock:
            if self._conn is None:
                opts: dict[str, Any] = {"port": self.port, "username": self.username}
                if self._client_keys is not None:
                    opts["client_keys"] = self._client_keys
                if self._known_hosts is not None:
                    opts["known_hosts"] = self._known_hosts
                try:
                    self._conn = await asyncio.wait_for(asyncssh.connect(self.host, **opts), self._timeout)
                except (OSError, asyncssh.Error, TimeoutError) as exc:
                    raise base.SchedulerError(f"ssh to {self.host}:{self.port} failed: {exc}") from exc
            return self._conn

    async def run(self, argv: Sequence[str]) -> runner.CommandResult:
        line = self.command_line(argv)
        name = argv[0]
        self.stats.calls[name] += 1
        limit = self._timeout
        for attempt in (1, 2):
            conn = await self._connect()
            try:
                res = await asyncio.wait_for(conn.run(line, check=False, encoding=None), limit)
                break
            except TimeoutError:
                self.stats.failures[name] += 1
                raise base.SchedulerError(f"{name} over ssh did not answer within {limit:g} s") from None
            except (OSError, asyncssh.Error) as exc:
                await self._drop()
                if attempt == 2:
                    self.stats.failures[name] += 1
                    raise base.SchedulerError(f"{name} over ssh to {self.host} failed: {exc}") from exc
        rc = res.exit_status if res.exit_status is not None else -1
        if rc != 0:
            self.stats.failures[name] += 1
        return runner.CommandResult(tuple(argv), rc, _text(res.stdout), _text(res.stderr))

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            await conn.wait_closed()

    async def close(self) -> None:
        await self._drop()


def _text(data: Any) -> str:
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return str(data or "")


def open_ssh(
    host: str,
    *,
    port: int = 22,
    username: str | None = None,
    client_keys: Sequence[str] | None = None,
    known_hosts: str | None = None,
    remote_env: Mapping[str, str] | None = None,
    timeout: float = runner.DEFAULT_TIMEOUT,
    cluster: str | None = None,
) -> slurm_local.SlurmCommandScheduler:
    """``slurm-ssh``: the CLI scheduler with its commands run on ``host``."""
    ssh = SshRunner(host, port=port, username=username, client_keys=client_keys, known_hosts=known_hosts,
                    remote_env=remote_env, timeout=timeout)
    return slurm_local.SlurmCommandScheduler(ssh, name=f"slurm-ssh://{host}", cluster=cluster, user=username)
