"""Shared lifecycle of the local services (Slurm, PostgreSQL) used by the test fixtures.

The hack/ scripts start and stop the daemons; this module decides *when*. A session that
finds the service running reuses it; a session that has to start it marks it as started by
pytest. Every session holds a lease (a file named by its pid) while it uses the service, and
the last session out stops a service that pytest started, unless ``TG_KEEP_CLUSTER=1``.
So two pytest runs in the same working tree (several engineers, or an IDE and a terminal)
never pull a cluster out from under each other, and a cluster someone started by hand is
never stopped by the tests.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
HACK_DIR = REPO_ROOT / "hack"

STARTED_MARKER = ".started-by-pytest"
"""File in a service's state dir: pytest started it, so the last session out stops it.
The hack scripts delete it on ``down``."""


class ServiceError(RuntimeError):
    """A hack script failed; the message carries its command line and output."""


def read_env_file(path: Path) -> dict[str, str]:
    """Parse the ``export NAME=VALUE`` lines the hack scripts write (values may be shell-quoted)."""
    result: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line.startswith("export "):
            continue
        name, sep, value = line.removeprefix("export ").partition("=")
        if not sep:
            continue
        words = shlex.split(value) if value else [""]
        result[name.strip()] = words[0] if words else ""
    return result


def run_script(argv: list[str], env: Mapping[str, str] | None = None, timeout: float = 900) -> str:
    """Run a hack script (argv list, no shell) and return its output; raise ServiceError on failure."""
    proc = subprocess.run(
        argv,
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        raise ServiceError(f"{shlex.join(argv)} exited with {proc.returncode}:\n{output}")
    return output


def script_succeeds(argv: list[str], env: Mapping[str, str] | None = None, timeout: float = 120) -> bool:
    """True when the script exits 0 (used for ``status``)."""
    proc = subprocess.run(
        argv,
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    return proc.returncode == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def keep_services() -> bool:
    """``TG_KEEP_CLUSTER=1`` leaves services pytest started running after the session."""
    return os.environ.get("TG_KEEP_CLUSTER", "") == "1"


@contextlib.contextmanager
def shared_service(
    script: Path,
    state_dir: Path,
    env: Mapping[str, str],
    up_args: tuple[str, ...] = (),
    status_args: tuple[str, ...] = (),
) -> Iterator[bool]:
    """Hold the service behind ``script`` (up/status/down) for the duration of the block.

    Yields True when this session started it. The service is stopped at the end only when
    pytest started it and no other live session holds a lease on it.
    """
    leases = state_dir / "leases"
    lock = state_dir / ".fixture.lock"
    marker = state_dir / STARTED_MARKER
    lease = leases / str(os.getpid())
    started = False
    with _locked(lock):
        if not script_succeeds([str(script), "status", *status_args], env):
            run_script([str(script), "up", *up_args], env)
            marker.touch()
            started = True
        leases.mkdir(parents=True, exist_ok=True)
        lease.write_text(f"{os.getpid()}\n")
    try:
        yield started
    finally:
        with _locked(lock):
            lease.unlink(missing_ok=True)
            others = [p for p in leases.iterdir() if p.name.isdigit() and _pid_alive(int(p.name))]
            if marker.exists() and not others and not keep_services():
                run_script([str(script), "down"], env)
                marker.unlink(missing_ok=True)
