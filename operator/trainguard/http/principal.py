"""Who is calling: a user, a role and how the caller proved it (``Principal``).

Place: what ``http.auth`` decides for each request and ``http.login`` keeps per browser session,
and what a ``Reviewer`` (``k8s/review.py``) returns for a bearer token. Its own module so that
``auth`` (which applies the sessions) and ``login`` (which stores principals) need not import each
other.
"""

from __future__ import annotations

import dataclasses
from typing import Final, Literal

Role = Literal["read", "write"]
ROLES: Final = ("read", "write")


@dataclasses.dataclass(frozen=True)
class Principal:
    user: str
    """How the audit log names the caller: ``token:`` plus 12 hex digits of the token's SHA-256,
    ``kube:<username>`` for a Kubernetes-reviewed token, or ``local``."""
    role: Role
    auth: Literal["none", "token", "kubernetes"]

    @property
    def can_write(self) -> bool:
        return self.role == "write"


LOCAL: Final = Principal(user="local", role="write", auth="none")
"""Every caller of a server on loopback without tokens."""
