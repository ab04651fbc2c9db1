"""Leader election on a ``coordination.k8s.io/v1`` Lease: one active operator among replicas.

Place in the loop: around the engine. Only the replica that holds the Lease runs the engine (the
only part that acts on the scheduler) and the WorkloadRecovery reconcile loop; the others keep
watching policies and wait. This is the election client-go's ``leaderelection`` package does,
reduced to what we need:

- a candidate takes the Lease when nobody holds it, or when the record it observes has not changed
  for ``lease_duration_s`` *by its own clock* (no comparison of clocks between machines);
- the holder renews every ``renew_interval_s``; every write carries the resourceVersion it read, so
  of two candidates racing for an expired Lease exactly one wins (the other gets 409 Conflict);
- a holder that could not renew for ``renew_deadline_s`` (shorter than the lease duration) steps
  down *before* anyone else may take over, and a holder that stops releases the Lease at once.

Fencing: leadership by the Lease alone is not enough, since a replica learns it lost the Lease only
at its next renewal, and a paused process learns nothing until it runs again. So each term as leader
starts with a claim in the shared audit store (``AuditStore.claim_leadership``: a term one higher
than the last claim), and ``LeaseFence`` hands the executor that token only while this replica still
holds the Lease by its own clock; the store refuses an intent whose token is not the latest claim.

kopf's own peering is not used for this: it pauses kopf's handlers, but the engine runs beside
them; the Lease ties exactly the acting part to exactly one replica.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client as k8s

from trainguard.k8s import client
from trainguard.model import actions, times
from trainguard.model import clock as clock_mod

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timing:
    """Lease timing, client-go's defaults scaled down for a recovery loop that polls every second."""

    lease_duration_s: float = 15.0
    """How long an unchanged record means the holder is gone. 15 s: a failover within ~20 s."""
    renew_deadline_s: float = 10.0
    """A holder that could not renew for this long steps down (must be < lease_duration_s)."""
    renew_interval_s: float = 2.0
    """How often the holder renews and a candidate retries."""

    def __post_init__(self) -> None:
        if not 0 < self.renew_interval_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError("need 0 < renew interval < renew deadline < lease duration")


def _micro_time(seconds: float) -> str:
    """A ``metav1.MicroTime`` as the apiserver parses it: always six fraction digits and ``Z``. Sent as
    a string, since the library would send a datetime as ``isoformat()``, which drops the fraction
    at a whole second (and the apiserver then refuses the Lease)."""
    return times.rfc3339(times.to_datetime(seconds), micro=True)


class Elector:
    """One candidate for one Lease."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str, identity: str, *,
                 clock: clock_mod.Clock, timing: Timing = Timing()) -> None:
        self.api = api
        self.leases = k8s.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.clock = clock
        self.timing = timing
        self.leading = False
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at = 0.0

    def _spec(self, now: float, acquire: bool, transitions: int) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.timing.lease_duration_s),
            "renewTime": _micro_time(now),
        }
        if acquire:
            spec["acquireTime"] = _micro_time(now)
            spec["leaseTransitions"] = transitions
        return spec

    async def step(self) -> bool:
        """Try to acquire or renew once; True while this candidate leads. Never raises on API or
        network errors: the holder steps down when it could not renew for the renew deadline."""
        now = self.clock.now()
        try:
            self.leading = await self._try(now)
        except client.API_ERRORS as exc:
            logger.warning("lease %s/%s: %s", self.namespace, self.name, client.message_of(exc))
            if self.leading and now - self._renewed_at >= self.timing.renew_deadline_s:
                logger.error("lease %s/%s not renewed for %.0f s: stepping down", self.namespace, self.name,
                             now - self._renewed_at)
                self.leading = False
        if self.leading:
            self._renewed_at = now
        return self.leading

    async def _try(self, now: float) -> bool:
        try:
            lease = await self.leases.read_namespaced_lease(self.name, self.namespace)
        except client.ApiException as exc:
            if not client.is_not_found(exc):
                raise
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(now, acquire=True, transitions=0)}
            try:
                await self.leases.create_namespaced_lease(self.namespace, client.body_of(body))
            except client.ApiException as race:
                if client.is_conflict(race):
                    return False
                raise
            logger.info("lease %s/%s acquired by %s (new lease)", self.namespace, self.name, self.identity)
            return True
        spec = lease.spec or k8s.V1LeaseSpec()
        holder = spec.holder_identity or ""
        record = (holder, spec.renew_time, spec.lease_transitions)
        if record != self._observed:
            self._observed, self._observed_at = record, now
        expired = now - self._observed_at >= self.timing.lease_duration_s
        if holder and holder != self.identity and not expired:
            return False
        transitions = int(spec.lease_transitions or 0)
        taking = holder != self.identity
        body = {"metadata": {"resourceVersion": lease.metadata.resource_version},
                "spec": self._spec(now, acquire=taking, transitions=transitions + 1 if taking else transitions)}
        try:
            answer = await client.merge_patch(self.leases.patch_namespaced_lease, self.name, self.namespace, body=body)
        except client.ApiException as exc:
            if client.is_conflict(exc):  # another candidate wrote first
                return False
            raise
        new = answer.spec or k8s.V1LeaseSpec()
        self._observed = (new.holder_identity or "", new.renew_time, new.lease_transitions)
        self._observed_at = now
        if taking:
            logger.info("lease %s/%s acquired by %s (was %s)", self.namespace, self.name, self.identity,
                        holder or "free")
        return True

    def holds(self) -> bool:
        """Whether this candidate leads and renewed within the renew deadline, by its own clock: the
        condition under which it may still act (it steps down at the deadline in ``step`` anyway)."""
        return self.leading and self.clock.now() - self._renewed_at < self.timing.renew_deadline_s

    async def release(self) -> None:
        """Give the Lease up at once (a clean stop), so another replica need not wait for expiry."""
        if not self.leading:
            return
        self.leading = False
        try:
            lease = await self.leases.read_namespaced_lease(self.name, self.namespace)
            if (lease.spec.holder_identity if lease.spec else None) != self.identity:
                return
            body = {"metadata": {"resourceVersion": lease.metadata.resource_version},
                    "spec": {"holderIdentity": None}}
            await client.merge_patch(self.leases.patch_namespaced_lease, self.name, self.namespace, body=body)
            logger.info("lease %s/%s released by %s", self.namespace, self.name, self.identity)
        except client.API_ERRORS as exc:
            logger.warning("lease %s/%s not released (it expires by itself): %s", self.namespace, self.name,
                           client.message_of(exc))


class LeaseFence:
    """``act.ports.Fence`` of one term as leader: the store's token while the Lease is held.

    ``token`` raises ``actions.FencedError`` as soon as the elector lost the Lease or could not renew
    it within the renew deadline, so no scheduler mutation starts after that; the store checks the
    token again (a newer claim by another replica refuses it).
    """

    def __init__(self, elector: Elector, token: actions.FenceToken) -> None:
        self.elector = elector
        self._token = token

    def token(self, workload: str = "") -> actions.FenceToken:
        if not self.elector.holds():
            raise actions.FencedError(f"{self._token.describe()}: Lease {self.elector.namespace}/{self.elector.name} "
                                      "lost or not renewed within the renew deadline")
        return self._token
