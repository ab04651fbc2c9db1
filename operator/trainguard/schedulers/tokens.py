"""Where slurmrestd's JWT comes from: a fixed string, or a file that is rotated under us.

Slurm JWTs expire (``scontrol token lifespan=...``), so production setups mount them from a
Secret that a CronJob renews, or a file a sidecar rewrites. A token read once at start-up works
until its first expiry and then every request is refused (HTTP 401/511) until someone restarts
us. ``TokenFile`` re-reads the file whenever it changed (a ``stat`` per request: a Kubernetes
Secret update swaps a symlink, which changes the inode and mtime the ``stat`` sees), and keeps the
last good token when the file is briefly missing or empty during a rotation.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Protocol

logger = logging.getLogger(__name__)


class TokenSource(Protocol):
    def token(self) -> str:
        """The token to send now; raises ValueError when there is none at all."""
        ...


class StaticToken:
    """A token given once (``SLURM_JWT``, ``--jwt``): it never changes."""

    def __init__(self, value: str) -> None:
        if not value.strip():
            raise ValueError("slurm-rest needs a JWT: pass --jwt-file, --jwt or set SLURM_JWT")
        self._value = value.strip()

    def token(self) -> str:
        return self._value


class TokenFile:
    """A token in a file, re-read when the file changes (inode, size or mtime)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._value = ""
        self.token()  # a missing or empty file at start-up is a configuration error, said at once

    def token(self) -> str:
        try:
            st = os.stat(self.path)
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            if stamp != self._seen:
                value = self.path.read_text(encoding="utf-8").strip()
                if value:
                    if self._seen is not None and value != self._value:
                        logger.info("slurm JWT: %s changed, using the new token", self.path)
                    self._value, self._seen = value, stamp
                elif not self._value:
                    raise ValueError(f"slurm JWT file {self.path} is empty")
        except OSError as exc:
            if not self._value:
                raise ValueError(f"cannot read the slurm JWT file {self.path}: {exc.strerror or exc}") from exc
            logger.warning("slurm JWT: cannot read %s (%s); keeping the last token", self.path, exc.strerror or exc)
        return self._value
