"""Every Kubernetes call is bounded in time, the adapter's raw reads included.

``k8s/client.ApiClient`` bounded a call only when the library read the answer itself
(``_preload_content``); the Kubernetes workload adapter reads its answers itself
(``_preload_content=False``: ``get_job``, the executor's check of every step, and the node list),
so an API server that accepted the connection and then said nothing held a recovery step forever.

An API server does not stall on demand, so kmock (an HTTP server that speaks the Kubernetes API)
answers the adapter here, over HTTP through a plain ``Configuration``: nothing of ours is patched.
It stalls twice: before the answer's headers, and in the middle of a body already started.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import kmock
import pytest
from kubernetes_asyncio import client as k8s

from trainguard.k8s import client
from trainguard.k8s.kubejobs import scheduler

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

BOUND_S = 0.5
"""The client's bound in these tests (30 s in production)."""
NEVER_S = 3600.0
JOBSETS = kmock.resource("jobset.x-k8s.io/v1alpha2/jobsets")
PODS = kmock.resource("v1/pods")
JOBSET = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": "train", "namespace": "ns", "uid": "u1", "resourceVersion": "1",
                       "annotations": {"trainguard.dev/policy": "default"}},
          "spec": {"replicatedJobs": []}}


def stall() -> object:
    """A payload kmock awaits at request time: an answer that never comes."""
    return asyncio.sleep(NEVER_S)


@pytest.fixture
async def emulator() -> AsyncIterator[tuple[kmock.KubernetesEmulator, scheduler.KubeScheduler]]:
    emulator = kmock.KubernetesEmulator()
    async with emulator, kmock.Server(emulator) as server:
        api = client.ApiClient(k8s.Configuration(host=str(server.url).rstrip("/")), timeout_s=BOUND_S)
        adapter = scheduler.KubeScheduler(api)  # not started: get_job is a fresh read, no watch
        try:
            yield emulator, adapter
        finally:
            await adapter.close()


async def timed_out(call: object) -> tuple[TimeoutError, float]:
    started = time.monotonic()
    with pytest.raises(TimeoutError) as caught:
        await asyncio.wait_for(call, timeout=20 * BOUND_S)  # type: ignore[arg-type]
    return caught.value, time.monotonic() - started


async def test_a_read_whose_answer_never_starts_times_out_naming_the_request(
    emulator: tuple[kmock.KubernetesEmulator, scheduler.KubeScheduler],
) -> None:
    server, adapter = emulator
    server["get", JOBSETS] << stall
    error, took = await timed_out(adapter.get_job("k8s/ns/JobSet/train"))
    assert took < 5 * BOUND_S, f"the client's bound did not end the read ({took:.1f} s)"
    assert "GET" in str(error) and "/jobsets/train" in str(error) and f"{BOUND_S:g} s" in str(error), str(error)


async def test_a_read_whose_body_stops_halfway_times_out_naming_the_request(
    emulator: tuple[kmock.KubernetesEmulator, scheduler.KubeScheduler],
) -> None:
    server, adapter = emulator
    server["get", JOBSETS] << JOBSET
    server["list", PODS] << (b'{"kind": "PodList", "items": [', stall)  # headers and a first chunk, then nothing
    error, took = await timed_out(adapter.get_job("k8s/ns/JobSet/train"))
    assert took < 5 * BOUND_S, f"the client's bound did not end the read ({took:.1f} s)"
    assert "GET" in str(error) and "/pods" in str(error) and "time bound" in str(error), str(error)


async def test_the_node_list_is_bounded_too(
    emulator: tuple[kmock.KubernetesEmulator, scheduler.KubeScheduler],
) -> None:
    server, adapter = emulator
    server["list", kmock.resource("v1/nodes")] << stall
    _, took = await timed_out(adapter.list_nodes())
    assert took < 5 * BOUND_S
