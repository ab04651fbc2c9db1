"""The operator shell sharded by Kubernetes Leases (``--shards``): two shells on the real kube-apiserver
split the workloads, each creates only its own WorkloadRecoveries and never collects the other's, and
when one stops renewing the other takes its shards over.

Each shell runs its real term (engine, reconcile loop, reporter, status writer) over one in-memory
``FakeScheduler`` they share (like one Slurm cluster) and one audit store file (one host).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client as k8s

from tests.support import fake_scheduler, kube
from trainguard import settings as settings_mod
from trainguard import shards
from trainguard.detect import catalog as catalog_mod
from trainguard.k8s import client, operator, recovery, shard_leases, status
from trainguard.model import clock, workloads
from trainguard.store import database

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.timeout(300)]

REPO_ROOT = Path(__file__).resolve().parents[3]
SHARDS = 4
TIMING = shards.Timing(lease_duration_s=3.0, renew_deadline_s=2.0, renew_interval_s=0.5)
CLUSTERS = [f"c{i}" for i in range(8)]
WAIT_S = 120.0


@pytest.fixture
def namespace(kube_api: kube.LocalKube) -> Iterator[str]:
    done = kube_api.kubectl("apply", "-k", str(REPO_ROOT / "crds"))
    assert done.returncode == 0, done.stderr
    name = kube.unique_name("tg-opshards")
    assert kube_api.kubectl("create", "namespace", name).returncode == 0
    yield name
    kube_api.kubectl("delete", "namespace", name, "--wait=false")


async def until(condition: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.2)


async def test_two_sharded_operator_shells_split_the_workloads_and_their_recoveries(
    kube_api: kube.LocalKube, namespace: str, tmp_path: Path,
) -> None:
    scheduler = fake_scheduler.FakeScheduler(nodes=["node1"])
    for n, cluster in enumerate(CLUSTERS * 2):
        job_id = str(500 + n)
        out = tmp_path / f"{job_id}.out"
        out.write_text("step 1\n")
        scheduler.jobs[job_id] = workloads.JobSnapshot(
            workload=f"slurm/{cluster}/{job_id}", job_id=job_id, state=workloads.JobState.RUNNING, nodes=["node1"],
            comment="trainguard", stdout_path=str(out))
    everything = {job.workload for job in scheduler.jobs.values()}
    catalog = catalog_mod.load_catalog()
    url = f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}"
    shells: list[operator.Shell] = []

    async def start(name: str) -> operator.Shell:
        config = operator.OperatorConfig(scheduler="slurm-local", workload_namespace=namespace, shards=SHARDS,
                                         replica_id=name, retention_s=0.0, status_interval_s=0.5,
                                         engine=settings_mod.EngineSettings(discovery_interval_s=0.3))
        shell = operator.Shell(config)
        shell.api = await client.load_api_client(str(kube_api.kubeconfig))
        shell.store = await database.open_store(url)
        shell.scheduler = scheduler
        shell.catalog = catalog
        spec = shards.ShardSpec(SHARDS, "cluster", name)
        shell.ownership = shards.Ownership(spec, shard_leases.KubeShardLeases(
            shell.api, namespace, shell.store, spec, clock.SystemClock(), timing=TIMING))
        await shell.terms.begin()
        shells.append(shell)
        return shell

    def tracked(shell: operator.Shell) -> set[str]:
        return set(shell.engine.runtimes) if shell.engine is not None else set()

    def held(shell: operator.Shell) -> set[int]:
        assert shell.ownership is not None
        return set(shell.ownership.leases.held())

    async def recoveries() -> set[str]:
        assert shells[0].api is not None
        listed = await k8s.CustomObjectsApi(shells[0].api).list_namespaced_custom_object(
            recovery.GROUP, recovery.VERSION, namespace, recovery.PLURAL)
        return {str(item["metadata"]["annotations"][status.WORKLOAD_ANNOTATION]) for item in listed["items"]}

    try:
        a = await start("replica-a")
        b = await start("replica-b")
        spec = shards.ShardSpec(SHARDS, "cluster", "x")

        def split() -> bool:
            mine = [{w for w in everything if spec.index_of(scheduler.jobs[w.rsplit("/", 1)[1]]) in held(s)}
                    for s in (a, b)]
            return (len(held(a)) == len(held(b)) == SHARDS // 2 and tracked(a) == mine[0] and tracked(b) == mine[1]
                    and tracked(a) | tracked(b) == everything)

        await until(split, "the two shells split the shards evenly and track exactly their shards' workloads")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while await recoveries() != everything:  # each shell creates the objects of its own workloads
            assert loop.time() < deadline, "not every workload got its WorkloadRecovery"
            await asyncio.sleep(0.5)
        for _ in range(3):  # several reconcile rounds with retention 0: neither collects the other's objects
            await asyncio.sleep(1.0)
            assert await recoveries() == everything

        renewing = a.engine.timer("shard-leases")  # type: ignore[union-attr]
        assert renewing is not None, "the shard lease timer runs"
        renewing.cancel()  # replica A stops renewing (a paused process)
        await until(lambda: held(b) == set(range(SHARDS)) and tracked(b) == everything,
                    "replica B took every shard over and tracks every workload")
        assert held(a) == set()
    finally:
        for shell in shells:
            if shell.engine is not None:
                shell.engine.abort()
            with contextlib.suppress(Exception):
                await shell.terms.end()
            if shell.api is not None:
                await shell.api.close()
            if shell.store is not None:
                await shell.store.close()
