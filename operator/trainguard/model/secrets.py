"""Reading a secret from a file: the one rule every setting that names a secret file follows.

Secrets (database URLs with passwords, JWTs, webhook URLs, routing keys) are never given on the
command line or in a config file, only as the path of a file a Kubernetes Secret or an administrator
mounts. The value is the file's text without surrounding whitespace (a trailing newline is how
editors and ``kubectl create secret --from-file`` leave it); an empty file is a mistake to refuse,
not an empty password to send.
"""

from __future__ import annotations

from pathlib import Path


class SecretFileError(ValueError):
    """The secret file cannot be read, or holds nothing; the message names the path and why."""


def read_secret(path: Path) -> str:
    """The secret held in ``path``, stripped; :class:`SecretFileError` if unreadable or empty."""
    try:
        value = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise SecretFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if not value:
        raise SecretFileError(f"{path} is empty")
    return value
