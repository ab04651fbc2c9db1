"""A real OpenSSH sshd on loopback, for the ``slurm-ssh`` transport tests.

``running_sshd(directory)`` generates a host key and a client key, writes an sshd_config
(high free port on 127.0.0.1, public key auth only, its own authorized_keys and pid file),
starts Debian's ``/usr/sbin/sshd -D`` as a child process, waits until it accepts
connections, and stops it on exit. Commands run over it are real processes on this host, so
the SSH tests drive the same local Slurm cluster as the slurm-local tests.
Needs the ``openssh-server`` package; ``require_sshd()`` skips with a clear reason without it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"


@dataclasses.dataclass(frozen=True)
class Sshd:
    host: str
    port: int
    user: str
    client_key: Path
    known_hosts: Path


def require_sshd() -> None:
    if not os.access(SSHD, os.X_OK) or shutil.which("ssh-keygen") is None:
        pytest.skip("openssh-server is not installed (apt-get install openssh-server)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=30,
                   stdin=subprocess.DEVNULL, capture_output=True)


@contextlib.contextmanager
def running_sshd(directory: Path, user: str = "root") -> Iterator[Sshd]:
    require_sshd()
    directory.mkdir(parents=True, exist_ok=True)
    host_key, client_key = directory / "host_ed25519", directory / "client_ed25519"
    _keygen(host_key)
    _keygen(client_key)
    (directory / "authorized_keys").write_text((directory / "client_ed25519.pub").read_text())
    os.chmod(directory / "authorized_keys", 0o600)
    port = _free_port()
    config = directory / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {directory / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {directory / 'authorized_keys'}\nPubkeyAuthentication yes\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
        f"AllowUsers {user}\nStrictModes no\nUsePAM no\nLogLevel ERROR\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    host_pub = (directory / "host_ed25519.pub").read_text().split()
    known_hosts = directory / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    log = (directory / "sshd.log").open("wb")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd exited ({proc.returncode}): {(directory / 'sshd.log').read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("sshd did not accept connections within 10 s")
            time.sleep(0.05)
        yield Sshd("127.0.0.1", port, user, client_key, known_hosts)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
