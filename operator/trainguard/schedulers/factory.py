"""Turn a ``--scheduler`` spec into a ``base.Scheduler``; the CLI and the engine call this.

Specs (the documented ``trainguard run --scheduler`` values, kept stable for users' unit files):
``slurm-local``, ``slurm-ssh://user@host[:port]``, ``slurm-rest://host:port`` (``https=True``
for TLS). Anything else is a clear ``ValueError`` naming the accepted forms.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from trainguard.schedulers import base, runner, slurm_local, slurm_rest, slurm_ssh, tokens

FORMS = "slurm-local, slurm-ssh://USER@HOST[:PORT], slurm-rest://HOST:PORT"

_SSH_RE = re.compile(r"^slurm-ssh://(?:(?P<user>[a-z_][a-z0-9_.-]{0,31})@)?(?P<host>[A-Za-z0-9.-]+|\[[0-9a-fA-F:]+\])"
                     r"(?::(?P<port>\d{1,5}))?/?$")
_REST_RE = re.compile(r"^slurm-rest://(?P<host>[A-Za-z0-9.-]+|\[[0-9a-fA-F:]+\])(?::(?P<port>\d{1,5}))?/?$")


def _port(text: str | None, default: int, spec: str) -> int:
    port = int(text) if text else default
    if not 0 < port < 65536:
        raise ValueError(f"bad port in scheduler {spec!r}")
    return port


def open_scheduler(
    spec: str,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = runner.DEFAULT_TIMEOUT,
    jwt: str | tokens.TokenSource | None = None,
    rest_user: str = "root",
    https: bool = False,
    fallback: base.Scheduler | None = None,
    client_keys: Sequence[str] | None = None,
    known_hosts: str | None = None,
    remote_env: Mapping[str, str] | None = None,
    cluster: str | None = None,
) -> base.Scheduler:
    """A scheduler for ``spec``. Options apply to the transports that use them:

    ``env`` (slurm-local: added to the commands' environment, e.g. ``SLURM_CONF``);
    ``client_keys``/``known_hosts``/``remote_env`` (slurm-ssh); ``jwt`` (slurm-rest: a token or a
    ``tokens.TokenFile``; default env ``SLURM_JWT``), ``rest_user``, ``https``, ``fallback`` (a CLI
    scheduler for what REST cannot do).
    """
    spec = spec.strip()
    if spec == "slurm-local":
        return slurm_local.open_local(env=dict(env or {}), timeout=timeout, cluster=cluster)
    if spec.startswith("slurm-ssh:"):
        m = _SSH_RE.match(spec)
        if m is None:
            raise ValueError(f"bad scheduler {spec!r}: expected slurm-ssh://USER@HOST[:PORT]")
        return slurm_ssh.open_ssh(m["host"].strip("[]"), port=_port(m["port"], 22, spec), username=m["user"],
                                  client_keys=client_keys, known_hosts=known_hosts, remote_env=remote_env,
                                  timeout=timeout, cluster=cluster)
    if spec.startswith("slurm-rest:"):
        m = _REST_RE.match(spec)
        if m is None:
            raise ValueError(f"bad scheduler {spec!r}: expected slurm-rest://HOST:PORT")
        token = jwt if jwt is not None else os.environ.get("SLURM_JWT", "")
        if not token:
            raise ValueError("slurm-rest needs a JWT: pass --jwt-file, --jwt or set SLURM_JWT")
        url = f"{'https' if https else 'http'}://{m['host']}:{_port(m['port'], 6820, spec)}"
        return slurm_rest.SlurmRest(url, token=token, user=rest_user, fallback=fallback, timeout=timeout,
                                    cluster=cluster)
    raise ValueError(f"unknown scheduler {spec!r}; expected one of: {FORMS}")
