"""k8s/client.py: what the kubernetes_asyncio client is given on top of the library's defaults.

A local aiohttp server on a real socket plays the part of an API server that accepts the connection
and never answers (the case a hung apiserver or a half-open connection produces): every
non-streaming call must end by the client's time bound, where the library alone waits forever.
The kopf ConnectionInfo -> Configuration mapping is checked field by field.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import kopf
import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s

from trainguard.k8s import client

pytestmark = [pytest.mark.unit]


@pytest.fixture
async def silent_server() -> AsyncIterator[tuple[str, list[str]]]:
    """An HTTP server that records each request (method, path, Content-Type) and then never answers."""
    seen: list[str] = []
    release = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path} {request.headers.get('Content-Type', '')}")
        await release.wait()
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", hang)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        release.set()
        await runner.cleanup()


async def ended(call: Awaitable[object]) -> BaseException | None:
    """How ``call`` ended by itself (its exception, None for an answer); fails the test when it has
    not ended after a minute, which is what a call without a time bound does here."""
    task = asyncio.ensure_future(call)
    done, _ = await asyncio.wait({task}, timeout=60)
    if not done:
        task.cancel()
        pytest.fail("the call did not end by itself: no time bound")
    return task.exception()


async def test_a_call_to_a_server_that_never_answers_ends_at_the_time_bound(
    silent_server: tuple[str, list[str]],
) -> None:
    url, seen = silent_server
    api = client.ApiClient(k8s.Configuration(host=url), timeout_s=0.5)
    try:
        assert isinstance(await ended(k8s.CoordinationV1Api(api).read_namespaced_lease("x", "default")), TimeoutError)
        # a merge patch is sent as one, on a custom object too (the library would pick JSON patch)
        assert isinstance(await ended(client.merge_patch(
            k8s.CustomObjectsApi(api).patch_namespaced_custom_object_status,
            "trainguard.dev", "v1alpha1", "default", "workloadrecoveries", "x", body={"status": {}})), TimeoutError)
    finally:
        await api.close()
    assert seen == ["GET /apis/coordination.k8s.io/v1/namespaces/default/leases/x application/json",
                    "PATCH /apis/trainguard.dev/v1alpha1/namespaces/default/workloadrecoveries/x/status "
                    "application/merge-patch+json"]


def test_connection_info_of_kopf_becomes_the_client_configuration(tmp_path: Path) -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    info = kopf.ConnectionInfo(server="https://10.0.0.1:6443/", token="secret-token",
                               ca_data=base64.b64encode(pem).decode(), insecure=False)
    configuration = client.configuration_of(info)
    assert configuration.host == "https://10.0.0.1:6443"
    assert configuration.api_key == {"BearerToken": "secret-token"}
    assert configuration.api_key_prefix == {"BearerToken": "Bearer"}
    assert configuration.verify_ssl is True
    assert Path(configuration.ssl_ca_cert).read_bytes() == pem
    assert Path(configuration.ssl_ca_cert).stat().st_mode & 0o077 == 0, "key material must be private"
    assert configuration.cert_file is None and configuration.key_file is None

    key = tmp_path / "tls.key"
    cert = tmp_path / "tls.crt"
    insecure = client.configuration_of(kopf.ConnectionInfo(
        server="https://h:1", insecure=True, ca_path=str(tmp_path / "ca"), certificate_path=str(cert),
        private_key_path=str(key)))
    assert insecure.verify_ssl is False and insecure.api_key == {}
    assert (insecure.ssl_ca_cert, insecure.cert_file, insecure.key_file) == (str(tmp_path / "ca"), str(cert), str(key))


def test_errors_are_classified_by_status() -> None:
    conflict = client.ApiException(status=409, reason="Conflict")
    conflict.body = '{"kind":"Status","reason":"Conflict","message":"the object has been modified"}'
    assert client.is_conflict(conflict) and not client.is_not_found(conflict) and not client.is_retryable(conflict)
    assert client.message_of(conflict) == "HTTP 409 Conflict: the object has been modified"
    assert client.is_not_found(client.ApiException(status=404, reason="Not Found"))
    assert client.is_gone(client.ApiException(status=410, reason="Gone"))
    assert client.is_retryable(client.ApiException(status=429, reason="Too Many Requests"))
    assert client.is_retryable(client.ApiException(status=503, reason="Service Unavailable"))
    assert client.status_of(TimeoutError()) is None and not client.is_retryable(TimeoutError())
    assert client.message_of(client.ApiException(status=500, reason="Internal")) == "HTTP 500 Internal: Internal"


def test_every_kind_of_call_has_a_time_bound() -> None:
    """A whole answer: TIMEOUT_S; a watch: its own timeoutSeconds and a margin; a follow log stream
    (silent while its container prints nothing): its connection only."""
    assert client.time_bound(None, 30.0) == 30.0
    assert client.time_bound([("labelSelector", "a=b")], 30.0) == 30.0
    assert client.time_bound([("watch", True), ("timeoutSeconds", 240)], 30.0) == 240 + client.STREAM_MARGIN_S
    assert client.time_bound({"watch": "true", "timeoutSeconds": "60"}, 30.0) == 60 + client.STREAM_MARGIN_S
    follow = client.time_bound([("container", "c"), ("follow", "true")], 30.0)
    assert not isinstance(follow, float) and (follow.total, follow.connect, follow.sock_connect) == (None, 30.0, 30.0)
