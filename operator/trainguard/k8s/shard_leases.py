"""Shard leases as Kubernetes Leases: the operator's backend of ``shards.Leases``.

Place: the kopf shell's side of sharding (``shards.py``). Each shard has a ``coordination.k8s.io``
Lease ``trainguard-shard-<key>-<N>-<i>`` in the operator's namespace, elected exactly like the
single-leader Lease (``k8s/lease.Elector``: expiry by the candidate's own clock, resourceVersion-
guarded writes so a race has one winner, step-down at the renew deadline). Taking a shard then
claims its term in the shared audit store (``AuditStore.claim_leadership`` under the Lease's name),
and that term is the shard's fencing token: the store refuses an intent fenced with an older one.

Replicas announce themselves with a member Lease ``trainguard-member-<key>-<N>-<replica>`` (renewed
every step); a replica takes shards up to its fair share, ceil(N / live members), and releases the
excess, as ``shards.StoreLeases`` does with database records.

Not wired into ``trainguard operator`` yet: the operator still runs one engine under its
single-leader Lease (``--peering``); see docs/sharding.md.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio import client as k8s

from trainguard import shards
from trainguard.k8s import client, lease
from trainguard.model import actions
from trainguard.model import clock as clock_mod
from trainguard.store import audit

logger = logging.getLogger(__name__)

DEFAULT_TIMING = shards.Timing()


def _dns(value: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:40] or "x"


class KubeShardLeases:
    """``shards.Leases`` on Kubernetes Leases, with the audit store's terms as fencing tokens."""

    def __init__(self, api: client.ApiClient, namespace: str, store: audit.AuditStore, spec: shards.ShardSpec,
                 clock: clock_mod.Clock, *, timing: shards.Timing = DEFAULT_TIMING) -> None:
        self.api = api
        self.namespace = namespace
        self.store = store
        self.spec = spec
        self.clock = clock
        self.timing = timing
        elector_timing = lease.Timing(timing.lease_duration_s, timing.renew_deadline_s, timing.renew_interval_s)
        base = f"trainguard-shard-{spec.key}-{spec.count}"
        self.member_prefix = f"trainguard-member-{spec.key}-{spec.count}-"
        self._electors = {i: lease.Elector(api, namespace, f"{base}-{i}", spec.replica, clock=clock,
                                           timing=elector_timing) for i in range(spec.count)}
        self._member = lease.Elector(api, namespace, self.member_prefix + _dns(spec.replica), spec.replica,
                                     clock=clock, timing=elector_timing)
        self._tokens: dict[int, actions.FenceToken] = {}
        self._seen: dict[str, tuple[Any, float]] = {}
        self._start = shards.shard_index(spec.replica, spec.count)

    def held(self) -> Mapping[int, actions.FenceToken]:
        return {i: t for i, t in self._tokens.items() if self._electors[i].holds()}

    async def _members(self) -> int:
        """Live member Leases: held, and renewed (record changed) within the lease duration by our clock."""
        now = self.clock.now()
        live = 0
        listed = await k8s.CoordinationV1Api(self.api).list_namespaced_lease(self.namespace)
        for item in (client.to_dict(self.api, lease_) for lease_ in listed.items or []):
            name = str((item.get("metadata") or {}).get("name") or "")
            if not name.startswith(self.member_prefix):
                continue
            spec = item.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            record = (holder, spec.get("renewTime"))
            seen = self._seen.get(name)
            if seen is None or seen[0] != record:
                self._seen[name] = seen = (record, now)
            if holder and (holder == self.spec.replica or now - seen[1] < self.timing.lease_duration_s):
                live += 1
        return max(1, live)

    async def step(self) -> None:
        await self._member.step()
        share = math.ceil(self.spec.count / await self._members())
        for index in list(self._tokens):
            if not await self._electors[index].step():
                logger.warning("shard %d: Lease lost; no longer acting on it", index)
                self._tokens.pop(index, None)
        for index in sorted(self._tokens, reverse=True)[:max(0, len(self._tokens) - share)]:
            self._tokens.pop(index, None)
            await self._electors[index].release()
            logger.info("shard %d released by %s (more than its share of %d)", index, self.spec.replica, share)
        for offset in range(self.spec.count):
            if len(self._tokens) >= share:
                break
            index = (self._start + offset) % self.spec.count
            elector = self._electors[index]
            if index in self._tokens or not await elector.step():
                continue
            token = await self.store.claim_leadership(elector.name, self.spec.replica, at=self.clock.now())
            self._tokens[index] = token
            logger.info("shard %d taken by %s: %s", index, self.spec.replica, token.describe())

    async def release(self) -> None:
        self._tokens.clear()
        for elector in [*self._electors.values(), self._member]:
            try:
                await elector.release()
            except client.API_ERRORS as exc:
                logger.warning("lease %s not released: %s", elector.name, client.message_of(exc))
