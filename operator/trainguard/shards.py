"""Sharding: several engine replicas split the workloads, one lease per shard.

Place: beside the engine, below the shells. When one engine process is not enough (many clusters,
more workloads than one process follows), every replica runs the engine with the same
``--shards N --shard-key cluster|partition|namespace`` against one shared audit database
(docs/sharding.md). A workload's shard is a stable hash of its key (its Slurm cluster, partition or
Kubernetes namespace) modulo N, the same in every replica. Each shard has a lease; a replica tracks
and acts on the workloads of the shards whose leases it holds, and nothing else.

Leases (``Leases``): ``StoreLeases`` keeps them in the audit store's lease table (the
``leadership`` rows of migration 0003: lease name, holder, term = the fencing token, last renewal),
taken and renewed by conditional updates in transactions, so of two replicas racing for a free or
expired shard exactly one wins. Under the operator, a Kubernetes Lease per shard decides the holder
and the store's claim gives the token (``k8s/lease.py``), the same way as for leadership.

Expiry is judged the way client-go's leader election judges it: a candidate takes a shard whose
record (holder, term, renewal) it has seen unchanged for ``lease_duration_s`` by its *own* clock, so
no two machines' clocks are compared; a holder that could not renew for ``renew_deadline_s``
(shorter) stops acting on the shard before anyone may take it over.

Fencing: ``Ownership`` is the executor's ``act.ports.Fence``. Every scheduler mutation asks it for
the token of the workload's shard; it raises ``FencedError`` unless this replica holds that shard
now, and the store refuses an intent whose token is not the shard's latest claim (a replica that
took the shard over claimed a higher term). So once a shard was taken over, nothing its former
holder begins is accepted, whatever that replica believes.

Balance: live replicas announce themselves with a member record under the same prefix (renewed like
a lease); a replica takes free shards only up to its fair share, ceil(N / live replicas), and
releases the ones above it, which the others then take at once (a released lease is free).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from trainguard.model import actions, workloads
from trainguard.model import clock as clock_mod
from trainguard.signals.discovery import JobLister
from trainguard.store import audit

logger = logging.getLogger(__name__)

ShardKey = workloads.ShardKey
"""The one definition is ``model.workloads.ShardKey`` (the settings name it too); kept here under its old name."""
KEYS: Final[tuple[ShardKey, ...]] = ("cluster", "partition", "namespace")


def default_replica_id() -> str:
    """Host name and process id: unique per live process on a network of hosts."""
    return f"{socket.gethostname()}-{os.getpid()}"


def key_value(job: workloads.JobSnapshot, key: ShardKey) -> str:
    """The value a workload is sharded by.

    ``cluster``: the Slurm cluster of a ``slurm/<cluster>/<job>`` workload (a Kubernetes workload's
    cluster is the one the operator watches: its kind). ``partition``: the partition; a pending job
    submitted to several is keyed by the first one listed (it may move to another shard when it starts
    elsewhere: the old holder lets it go, the new one resumes from the shared store).
    ``namespace``: the Kubernetes namespace (empty for Slurm jobs: all in one shard).
    """
    if key == "cluster":
        return cluster_of(job.workload)
    if key == "partition":
        return job.partition.split(",")[0]
    return job.namespace


def cluster_of(workload: str) -> str:
    """The cluster part of a workload id: ``slurm/<cluster>/<job>``; else its kind (``jobset/...``)."""
    parts = workload.split("/")
    return parts[1] if parts[0] == "slurm" and len(parts) > 2 else parts[0]


def shard_index(value: str, count: int) -> int:
    """Stable across processes and machines (CRC-32, not Python's salted ``hash``)."""
    return zlib.crc32(value.encode()) % count


@dataclass(frozen=True)
class ShardSpec:
    """How this deployment shards, and who this replica is. Equal in every replica but ``replica``."""

    count: int
    key: ShardKey
    replica: str

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError("shards must be at least 1")
        if self.key not in KEYS:
            raise ValueError(f"shard key must be one of {', '.join(KEYS)}, not {self.key!r}")
        if not self.replica or "/" in self.replica:
            raise ValueError(f"replica id must be non-empty and without '/': {self.replica!r}")

    @property
    def prefix(self) -> str:
        """Common prefix of this sharding's records: a replica started with other ``--shards`` or
        ``--shard-key`` has other lease names and is reported as a foreign member (``StoreLeases``)."""
        return f"shards/{self.key}/{self.count}/"

    def lease(self, index: int) -> str:
        return f"{self.prefix}shard-{index}"

    def member(self, replica: str) -> str:
        return f"{self.prefix}member/{replica}"

    def index_of(self, job: workloads.JobSnapshot) -> int:
        return shard_index(key_value(job, self.key), self.count)


@dataclass(frozen=True)
class Timing:
    """Shard lease timing: the Kubernetes Lease defaults of ``k8s/lease.py``."""

    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    renew_interval_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.renew_interval_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError("need 0 < renew interval < renew deadline < lease duration")


class Leases(Protocol):
    """Where the shard leases live; ``step`` is called every ``timing.renew_interval_s``."""

    timing: Timing

    async def step(self) -> None:
        """Renew the shards held, take free or expired ones up to the fair share, release the excess.
        Raises when the lease backend cannot be reached (the caller retries with backoff)."""

    def held(self) -> Mapping[int, actions.FenceToken]:
        """Shard index -> token, for the shards held and renewed within the renew deadline (own clock)."""

    async def release(self) -> None:
        """Give every lease up (a clean stop): the others take the shards at once, without expiry."""


class StoreLeases:
    """Shard leases in the shared audit database (``AuditStore.take_lease`` / ``renew_lease``)."""

    def __init__(self, store: audit.AuditStore, spec: ShardSpec, clock: clock_mod.Clock, *,
                 timing: Timing = Timing()) -> None:
        self.store = store
        self.spec = spec
        self.clock = clock
        self.timing = timing
        self._tokens: dict[int, actions.FenceToken] = {}
        self._renewed_at: dict[int, float] = {}
        self._member: actions.FenceToken | None = None
        self._observed: dict[str, tuple[audit.LeaseRecord, float]] = {}
        """Lease name -> the record last seen and since when (own clock) it has not changed."""
        self._start = shard_index(spec.replica, spec.count)
        """Where this replica starts looking for free shards: replicas starting together spread out."""

    def held(self) -> Mapping[int, actions.FenceToken]:
        now = self.clock.now()
        return {i: t for i, t in self._tokens.items() if now - self._renewed_at[i] < self.timing.renew_deadline_s}

    def _expired(self, lease: str, record: audit.LeaseRecord | None, now: float) -> bool:
        if record is None:
            self._observed.pop(lease, None)
            return True
        seen = self._observed.get(lease)
        if seen is None or seen[0] != record:
            self._observed[lease] = (record, now)
            return not record.holder
        return not record.holder or now - seen[1] >= self.timing.lease_duration_s

    async def step(self) -> None:
        now = self.clock.now()
        records = await self.store.lease_records(self.spec.prefix)
        await self._announce(records, now)
        members = self._live_members(records, now)
        share = math.ceil(self.spec.count / max(1, members))
        await self._renew(now)
        await self._rebalance(share, now)
        for index in range(self.spec.count):  # every shard's record is watched, even while we hold our
            lease = self.spec.lease(index)      # share: a dead replica's shards then expire together with
            self._expired(lease, records.get(lease), now)  # its membership, in one lease period, not two
        for offset in range(self.spec.count):
            if len(self._tokens) >= share:
                break
            index = (self._start + offset) % self.spec.count
            if index in self._tokens:
                continue
            lease = self.spec.lease(index)
            record = records.get(lease)
            mine = record is not None and record.holder == self.spec.replica  # a former run of this replica
            if not (mine or self._expired(lease, record, now)):
                continue
            token = await self.store.take_lease(lease, self.spec.replica,
                                                observed_term=None if record is None else record.term, at=now)
            if token is None:
                continue  # another replica took it first
            self._tokens[index], self._renewed_at[index] = token, now
            logger.info("shard %d/%d (%s) taken by %s (term %d; was %s)", index, self.spec.count, self.spec.key,
                        self.spec.replica, token.term, (record.holder if record else "") or "free")

    async def _announce(self, records: Mapping[str, audit.LeaseRecord], now: float) -> None:
        """Renew this replica's member record (take it when it is new or a former run's)."""
        if self._member is not None and await self.store.renew_lease(self._member, at=now):
            return
        record = records.get(self.spec.member(self.spec.replica))
        self._member = await self.store.take_lease(self.spec.member(self.spec.replica), self.spec.replica,
                                                   observed_term=None if record is None else record.term, at=now)

    def _live_members(self, records: Mapping[str, audit.LeaseRecord], now: float) -> int:
        live = 0
        for name, record in records.items():
            if not name.startswith(self.spec.member("")):
                continue
            if record.holder == self.spec.replica or not self._expired(name, record, now):
                live += 1
        return live

    async def _renew(self, now: float) -> None:
        for index, token in list(self._tokens.items()):
            try:
                renewed = await self.store.renew_lease(token, at=now)
            except Exception:
                if now - self._renewed_at[index] >= self.timing.renew_deadline_s:
                    logger.error("shard %d not renewed for %.0f s: stepping down", index, now - self._renewed_at[index])
                    self._drop(index)
                raise
            if renewed:
                self._renewed_at[index] = now
            else:
                logger.warning("shard %d was taken over by another replica: no longer acting on it", index)
                self._drop(index)

    async def _rebalance(self, share: int, now: float) -> None:
        """More than the fair share: release the excess (highest indices first) for the others."""
        for index in sorted(self._tokens, reverse=True)[:max(0, len(self._tokens) - share)]:
            token = self._tokens[index]
            self._drop(index)
            with contextlib.suppress(Exception):  # unreleased, it expires by itself
                await self.store.release_lease(token, at=now)
            logger.info("shard %d released by %s (more than its share of %d)", index, self.spec.replica, share)

    def _drop(self, index: int) -> None:
        self._tokens.pop(index, None)
        self._renewed_at.pop(index, None)

    async def release(self) -> None:
        now = self.clock.now()
        tokens = [*self._tokens.values(), *([self._member] if self._member is not None else [])]
        self._tokens.clear()
        self._renewed_at.clear()
        self._member = None
        for token in tokens:
            try:
                await self.store.release_lease(token, at=now)
            except Exception as exc:  # it expires by itself
                logger.warning("lease %s not released: %s", token.lease, exc)


class Ownership:
    """Which workloads this replica owns now, and the ``act.ports.Fence`` of their shards.

    The engine's discovery lists through ``owned_jobs`` (only the workloads of held shards reach it);
    the index of every workload listed is remembered, so a generation left pending by a replica that
    died is resumed by the replica that now holds its shard.
    """

    def __init__(self, spec: ShardSpec, leases: Leases) -> None:
        self.spec = spec
        self.leases = leases
        self._index: dict[str, int] = {}
        self._known: frozenset[int] = frozenset()

    def note(self, jobs: Sequence[workloads.JobSnapshot]) -> None:
        """Remember the shard of every job listed (owned or not)."""
        for job in jobs:
            self._index[job.workload] = self.spec.index_of(job)

    def owned_jobs(self, jobs: Sequence[workloads.JobSnapshot]) -> list[workloads.JobSnapshot]:
        self.note(jobs)
        held = self.leases.held()
        return [job for job in jobs if self._index[job.workload] in held]

    def index_of(self, workload: str) -> int | None:
        """The shard of a workload seen in a listing; else, for the ``cluster`` key, from its id alone."""
        index = self._index.get(workload)
        if index is None and self.spec.key == "cluster":
            index = shard_index(cluster_of(workload), self.spec.count)
        return index

    def owns(self, workload: str) -> bool:
        index = self.index_of(workload)
        return index is not None and index in self.leases.held()

    def gained(self) -> frozenset[int]:
        """Shards held now that were not at the previous call (taken at start, or over from another)."""
        held = frozenset(self.leases.held())
        new, self._known = held - self._known, held
        return new

    def token(self, workload: str = "") -> actions.FenceToken:
        index = self.index_of(workload)
        if index is None:
            raise actions.FencedError(f"{workload}: its shard is not known yet (not listed by the scheduler)")
        token = self.leases.held().get(index)
        if token is None:
            raise actions.FencedError(f"{workload}: shard {index} is not held by {self.spec.replica} (taken over, "
                                      "released, or not renewed within the renew deadline)")
        return token


class OwnedLister:
    """The scheduler's listing as discovery sees it under sharding: only the jobs of held shards. A
    shard taken over makes its jobs *new* to discovery (tracked from the shared store's positions);
    a shard lost makes them *gone*."""

    def __init__(self, lister: JobLister, ownership: Ownership) -> None:
        self._lister = lister
        self._ownership = ownership

    async def list_jobs(self) -> list[workloads.JobSnapshot]:
        return self._ownership.owned_jobs(await self._lister.list_jobs())
