"""Shard leases in a shared store (``shards.StoreLeases``), two replicas on one SQLite file, driven by
hand on a manual clock: how long a dead replica's shard waits for a new holder."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard import shards
from trainguard.model import clock
from trainguard.store import database

pytestmark = pytest.mark.unit

TIMING = shards.Timing()  # the defaults: lease 15 s, renew deadline 10 s, renew every 2 s


async def test_a_dead_replicas_shard_is_taken_over_after_one_lease_period_not_two(tmp_path: Path) -> None:
    """The survivor holds its fair share while the dead replica still counts as a member; it must
    watch the dead one's shard record all along, so the shard is taken once the record has been
    unchanged for one lease period (the membership expires in the same period), not only after the
    membership expired and then a second lease period of watching."""
    store = await database.open_store(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    manual = clock.ManualClock(1_000_000.0)
    try:
        a, b = (shards.StoreLeases(store, shards.ShardSpec(2, "partition", name), manual, timing=TIMING)
                for name in ("replica-a", "replica-b"))
        for _ in range(2):  # both start and see each other
            await a.step()
            await b.step()
            manual.advance(TIMING.renew_interval_s)
        assert len(a.held()) == 1 and len(b.held()) == 1
        lost = set(a.held())
        # a dies: it renews nothing from now on
        waited = 0.0
        while not lost <= set(b.held()) and waited <= 3 * TIMING.lease_duration_s:
            await b.step()
            manual.advance(TIMING.renew_interval_s)
            waited += TIMING.renew_interval_s
        assert lost <= set(b.held()), "the dead replica's shard was never taken over"
        assert waited <= TIMING.lease_duration_s + TIMING.renew_interval_s, waited
    finally:
        await store.close()
