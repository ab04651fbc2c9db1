"""Who a bearer token belongs to, and what they may do, asked of Kubernetes itself.

Place: the operator's ``http.auth.Reviewer`` (``k8s/operator/entry.py`` hands it to ``http.api.mount``).
A token that is not in ``--http-token-file`` is sent to the API server as a TokenReview; for an
authenticated user, two SubjectAccessReviews on our CRD decide the role with the user's own RBAC:

- ``patch`` on ``recoverypolicies.trainguard.dev`` -> ``write``;
- else ``list`` on them -> ``read``;
- else 403: authenticated, but not allowed to see Trainguard's objects.

The reviews are made in the operator's home namespace (where its RecoveryPolicies live), or
cluster-wide when it has none. Answers are cached for ``ttl`` seconds per token digest (the token
itself is not kept), so a console page's dozen calls cost two reviews, not two dozen; a revoked
binding takes effect within ``ttl``. The operator's ServiceAccount needs ``create`` on
``tokenreviews`` and ``subjectaccessreviews`` (manifests/base/rbac.yaml).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any, Final

from kubernetes_asyncio import client as k8s

from trainguard.http import auth, principal
from trainguard.k8s import client

TTL_S: Final = 30.0
CACHE_MAX: Final = 1000


class KubeReviewer:
    """TokenReview + SubjectAccessReview through the operator's API client (``api_of``: None while
    the operator is still starting)."""

    def __init__(self, api_of: Callable[[], client.ApiClient | None], namespace: str | None, *, ttl: float = TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._api_of = api_of
        self.namespace = namespace
        self.ttl = ttl
        self._clock = clock
        self._cache: dict[str, tuple[float, principal.Principal | None]] = {}

    async def __call__(self, token: str) -> principal.Principal | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self._clock()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        api = self._api_of()
        if api is None:
            raise auth.ReviewUnavailable("the operator is still starting")
        try:
            principal = await self._review(api, token)
        except client.API_ERRORS as exc:
            raise auth.ReviewUnavailable(f"the Kubernetes API did not answer the review: {client.message_of(exc)}") \
                from exc
        if len(self._cache) >= CACHE_MAX:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
        self._cache[key] = (now + self.ttl, principal)
        return principal

    async def _review(self, api: client.ApiClient, token: str) -> principal.Principal | None:
        answer = await k8s.AuthenticationV1Api(api).create_token_review(client.body_of(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}))
        status = answer.status
        if status is None or not status.authenticated or status.user is None:
            return None
        user = status.user
        name = str(user.username or "")
        if not name:
            return None
        if await self._allowed(api, user, "patch"):
            role: principal.Role = "write"
        elif await self._allowed(api, user, "list"):
            role = "read"
        else:
            where = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
            raise auth.Forbidden(f"{name} may not list recoverypolicies.trainguard.dev {where}: no read role")
        return principal.Principal(user=f"kube:{name}"[:200], role=role, auth="kubernetes")

    async def _allowed(self, api: client.ApiClient, user: Any, verb: str) -> bool:
        """``user`` is the TokenReview's ``V1UserInfo``; the review asks for exactly that user."""
        attributes: dict[str, Any] = {"group": "trainguard.dev", "resource": "recoverypolicies", "verb": verb}
        if self.namespace:
            attributes["namespace"] = self.namespace
        spec: dict[str, Any] = {"user": user.username, "groups": list(user.groups or []),
                                "resourceAttributes": attributes}
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = user.extra
        answer = await k8s.AuthorizationV1Api(api).create_subject_access_review(client.body_of(
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}))
        return bool(answer.status is not None and answer.status.allowed)
