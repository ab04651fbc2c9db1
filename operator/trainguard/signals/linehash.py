"""The one digest of a log line for de-duplication and stored positions.

Every log source that cannot name a line by a byte offset (Loki, VictoriaLogs, Kubernetes pod logs)
remembers lines it has read by a digest of what identifies them: the stream (or pod and container)
and the text. The digests are stored in tail positions, so their bytes must never change between
releases: each caller keeps its parts, its length and its encoding-error mode.
"""

from __future__ import annotations

import hashlib


def digest(*parts: str, chars: int, errors: str = "surrogateescape") -> str:
    """The first ``chars`` hex characters of SHA-256 over ``parts`` joined by NUL, UTF-8 encoded with
    ``errors`` (lines read from bytes carry surrogate escapes; JSON-decoded ones may hold lone
    surrogates, which only ``replace`` can encode)."""
    return hashlib.sha256("\0".join(parts).encode("utf-8", errors=errors)).hexdigest()[:chars]
