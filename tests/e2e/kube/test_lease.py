"""Leader election (k8s/lease.py) on the real API server: one holder, takeover only after expiry
by the candidate's own clock, a race for an expired Lease has one winner, release hands over at once.

The clocks are ManualClocks (one per candidate, as on two machines); the Lease, its resourceVersion
and the 409s are the real server's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import kopf
import pytest
from kubernetes_asyncio import client as k8s

from tests.e2e.kube import operator_process as op
from tests.support import kube
from trainguard.k8s import client, lease
from trainguard.model import clock

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.timeout(300)]

TIMING = lease.Timing(lease_duration_s=15, renew_deadline_s=10, renew_interval_s=2)


@pytest.fixture
def namespace(kube_api: kube.LocalKube) -> Iterator[str]:
    name = kube.unique_name("tg-lease")
    op.ok(kube_api.kubectl("create", "namespace", name))
    yield name
    kube_api.kubectl("delete", "namespace", name, "--wait=false")


def api_client(api: kube.LocalKube) -> client.ApiClient:
    """Built as the operator builds its own: from a kopf ConnectionInfo (TLS with the CA's data)."""
    return client.from_connection_info(kopf.ConnectionInfo(server=api.server, token=api.admin_token,
                                                           ca_data=api.ca_data))


def test_one_holder_then_takeover_after_expiry_then_release(kube_api: kube.LocalKube, namespace: str) -> None:
    async def scenario() -> None:
        clock_a, clock_b = clock.ManualClock(1000.0), clock.ManualClock(5000.0)  # unrelated clocks
        async with api_client(kube_api) as api:
            a = lease.Elector(api, namespace, "trainguard", "replica-a", clock=clock_a, timing=TIMING)
            b = lease.Elector(api, namespace, "trainguard", "replica-b", clock=clock_b, timing=TIMING)
            assert await a.step() is True
            assert await b.step() is False
            for _ in range(5):  # a renews; b keeps seeing a changing record and never takes over
                clock_a.advance(2)
                clock_b.advance(10)
                assert await a.step() is True
                assert await b.step() is False
            clock_b.advance(14)  # a stops renewing: not yet expired by b's clock
            assert await b.step() is False
            clock_b.advance(1)
            assert await b.step() is True
            holder = await k8s.CoordinationV1Api(api).read_namespaced_lease("trainguard", namespace)
            assert holder.spec.holder_identity == "replica-b"
            assert holder.spec.lease_transitions == 1
            clock_a.advance(2)
            assert await a.step() is False, "the old holder must see the new one"
            await b.release()
            assert await a.step() is True, "a released Lease is free at once"

    asyncio.run(scenario())


def test_a_race_for_an_expired_lease_has_exactly_one_winner(kube_api: kube.LocalKube, namespace: str) -> None:
    async def scenario() -> list[bool]:
        async with api_client(kube_api) as api:
            old = lease.Elector(api, namespace, "race", "gone", clock=clock.ManualClock(), timing=TIMING)
            assert await old.step()
            clocks = [clock.ManualClock(), clock.ManualClock()]
            candidates = [lease.Elector(api, namespace, "race", f"c{i}", clock=c, timing=TIMING)
                          for i, c in enumerate(clocks)]
            for candidate in candidates:
                assert await candidate.step() is False  # observe the record
            for c in clocks:
                c.advance(TIMING.lease_duration_s)
            return list(await asyncio.gather(*(candidate.step() for candidate in candidates)))

    results = asyncio.run(scenario())
    assert sorted(results) == [False, True]
