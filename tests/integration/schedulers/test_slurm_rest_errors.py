"""slurmrestd failures say what happened: a port where nothing listens is "connection refused to URL",
a token the real slurmrestd rejects is "token rejected with HTTP <status> by URL". When no OpenAPI document
could be read at all (refused; a token rejected there, as a proxy in front of slurmrestd does), both used
to end as "no supported API version (offered: none)", which sent people looking for a version problem."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import pytest

from tests.support import slurm
from trainguard.schedulers import base, slurm_rest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _closed_port() -> int:
    """A loopback port nothing listens on: bound by us, then released (connect() is refused there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_a_port_where_nothing_listens_is_connection_refused() -> None:
    port = _closed_port()
    rest = slurm_rest.SlurmRest(f"http://127.0.0.1:{port}", token="any-token", timeout=10)
    try:
        with pytest.raises(base.SchedulerError) as raised:
            await rest.api_version()
    finally:
        await rest.close()
    message = str(raised.value)
    assert not isinstance(raised.value, base.Unsupported), message
    assert f"connection refused to http://127.0.0.1:{port}/openapi/v3" in message
    assert "offered" not in message


@pytest.mark.slurm
async def test_a_rejected_token_names_the_http_status(slurm_cluster: slurm.SlurmCluster) -> None:
    url = urlsplit(slurm_cluster.rest_url)
    rest = slurm_rest.SlurmRest(f"http://{url.hostname}:{url.port}", token="not-a-valid-jwt", timeout=30)
    try:
        with pytest.raises(base.SchedulerError) as raised:
            await rest.api_version()  # served without a token by 22.05 and 24.11 (a proxy may ask for one)
            await rest.list_nodes()
    finally:
        await rest.close()
    message = str(raised.value)
    assert "offered" not in message, message
    if slurm_cluster.api_version == "v0.0.38":
        # 22.05 serves its OpenAPI document to anyone and answers a bad token with HTTP 500 "Unspecified
        # error", the same as other failures: the message says what it looks like.
        assert "HTTP 500" in message and "invalid or expired JWT" in message, message
        return
    # 24.11 (TG_SLURM_ROOT, the CI's second tier): HTTP 511 "Protocol authentication error"; 26.05 the
    # same, followed by a second HTTP 511 answer on the closed connection (read as the rejection too).
    assert "token rejected with HTTP" in message, message
    assert any(f"HTTP {status} by {slurm_cluster.rest_url}" in message for status in slurm_rest.TOKEN_REJECTED), \
        message
