"""Shard leases on real Kubernetes Leases (``k8s/shard_leases.py``): two replicas split the shards,
one that stops renewing loses them to the other after expiry, and its tokens are refused by the store.

Real kube-apiserver (Leases, resourceVersion conflicts) and a real audit store shared by both
replicas (an SQLite file: one host); short lease timings, every wait on a condition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import kube
from trainguard import shards
from trainguard.k8s import client, shard_leases
from trainguard.model import actions, advice, clock
from trainguard.store import database

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.timeout(300)]

SHARDS = 4
TIMING = shards.Timing(lease_duration_s=3.0, renew_deadline_s=2.0, renew_interval_s=0.5)
ROUNDS = 200


@pytest.fixture
def namespace(kube_api: kube.LocalKube) -> Iterator[str]:
    name = kube.unique_name("tg-shards")
    assert kube_api.kubectl("create", "namespace", name).returncode == 0
    yield name
    kube_api.kubectl("delete", "namespace", name, "--wait=false")


async def test_two_replicas_split_the_shard_leases_and_one_takes_over_after_the_other_stops(
    kube_api: kube.LocalKube, namespace: str, tmp_path: Path,
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}"
    store_a, store_b = await database.open_store(url), await database.open_store(url)
    async with await client.load_api_client(str(kube_api.kubeconfig)) as api:
        a = shard_leases.KubeShardLeases(api, namespace, store_a, shards.ShardSpec(SHARDS, "cluster", "replica-a"),
                                         clock.SystemClock(), timing=TIMING)
        b = shard_leases.KubeShardLeases(api, namespace, store_b, shards.ShardSpec(SHARDS, "cluster", "replica-b"),
                                         clock.SystemClock(), timing=TIMING)
        try:
            await a.step()
            assert set(a.held()) == set(range(SHARDS))  # alone: every shard
            for _ in range(ROUNDS):
                await a.step()
                await b.step()
                if len(a.held()) == len(b.held()) == SHARDS // 2:
                    break
                await asyncio.sleep(TIMING.renew_interval_s)
            assert set(a.held()) | set(b.held()) == set(range(SHARDS)) and not set(a.held()) & set(b.held())
            assert len(a.held()) == len(b.held()) == SHARDS // 2

            old = dict(a.held())  # a stops renewing now (a paused or dead replica)
            for _ in range(ROUNDS):
                await b.step()
                if set(b.held()) == set(range(SHARDS)):
                    break
                await asyncio.sleep(TIMING.renew_interval_s)
            assert set(b.held()) == set(range(SHARDS))
            assert a.held() == {}  # not renewed within the renew deadline, by its own clock
            index, token = next(iter(old.items()))
            assert b.held()[index].term > token.term
            await store_a.upsert_workload(workload="slurm/x/1", scheduler="slurm", job_id="1", at=1.0)
            await store_a.record_advice(advice.Advice.model_validate({
                "workload": "slurm/x/1", "attempt": 0, "generation": 1, "action": "requeue", "mode": "Action",
                "deadline": 9e9, "policy": "p"}), at=1.0)
            with pytest.raises(actions.FencedError, match="replica-b"):
                await store_a.begin_action(actions.ActionRecord(
                    workload="slurm/x/1", attempt=0, generation=1, step="requeue",
                    operation=actions.Operation.REQUEUE, args={"job_id": "1"}), at=2.0, fence=token)
        finally:
            await b.release()
            await store_a.close()
            await store_b.close()
