"""Fixtures for the scheduler transport tests: one real sshd per module, schedulers per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit

import pytest

from tests.support import slurm, sshd
from trainguard.schedulers import base, factory

TRANSPORTS = ["slurm-local", "slurm-ssh", "slurm-rest"]


@pytest.fixture(scope="module")
def loopback_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sshd.Sshd]:
    with sshd.running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def open_transport(kind: str, cluster: slurm.SlurmCluster, server: sshd.Sshd | None) -> base.Scheduler:
    conf = cluster.client_env
    if kind == "slurm-local":
        return factory.open_scheduler("slurm-local", env=conf)
    if kind == "slurm-ssh":
        assert server is not None
        return factory.open_scheduler(f"slurm-ssh://{server.user}@{server.host}:{server.port}",
                                      client_keys=[str(server.client_key)], known_hosts=str(server.known_hosts),
                                      remote_env=conf)
    url = urlsplit(cluster.rest_url)
    return factory.open_scheduler(f"slurm-rest://{url.hostname}:{url.port}", jwt=cluster.jwt,
                                  fallback=factory.open_scheduler("slurm-local", env=conf))


@pytest.fixture(params=TRANSPORTS)
async def scheduler(request: pytest.FixtureRequest, slurm_cluster: slurm.SlurmCluster) -> AsyncIterator[base.Scheduler]:
    server = request.getfixturevalue("loopback_sshd") if request.param == "slurm-ssh" else None
    s = open_transport(request.param, slurm_cluster, server)
    try:
        yield s
    finally:
        await s.close()
