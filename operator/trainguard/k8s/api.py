"""A small asyncio client of the Kubernetes API for the writes the operator makes itself.

Place in the loop: under the kopf shell (``k8s/operator.py``). kopf watches and dispatches; the
writes that do not belong to a kopf handler — WorkloadRecovery objects created for discovered Slurm
jobs, their status, Events, the Slinky cordon annotation on a Node — go through this client, with
the same credentials kopf logged in with (``kopf.ConnectionInfo``, from the kubeconfig or the pod's
ServiceAccount). It speaks plain JSON over aiohttp: no generated client, no extra dependency.

Errors are ``ApiError`` with the HTTP status and the server's ``Status`` message, so callers decide
per status: 404 (gone), 409 (stale resourceVersion or already exists), 429/5xx (retry later).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlencode

import aiohttp

logger = logging.getLogger(__name__)

MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
TIMEOUT_S: Final = 30.0
"""Total time of one API call; the apiserver answers in milliseconds, a hung connection must not
stall the status loop."""


class ApiError(RuntimeError):
    """The API answered with an error status; ``status`` is the HTTP code, ``reason`` the Status reason."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"HTTP {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def retryable(self) -> bool:
        """Throttling and server-side failures are worth another try; the rest are not."""
        return self.status == 429 or self.status >= 500


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST API."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
        if subresource:
            base += f"/{subresource}"
        return base

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


WORKLOAD_RECOVERIES: Final = Resource("trainguard.dev", "v1alpha1", "workloadrecoveries")
RECOVERY_POLICIES: Final = Resource("trainguard.dev", "v1alpha1", "recoverypolicies")
EVENTS: Final = Resource("", "v1", "events")
NODES: Final = Resource("", "v1", "nodes", namespaced=False)
PODS: Final = Resource("", "v1", "pods")


@dataclass(frozen=True)
class Credentials:
    """The part of ``kopf.ConnectionInfo`` this client uses (kept kopf-free for the type checker)."""

    server: str
    token: str | None = None
    ca_path: str | None = None
    ca_data: str | None = None
    """Base64 of the PEM bundle, as in a kubeconfig's ``certificate-authority-data``."""
    insecure: bool = False
    certificate_path: str | None = None
    certificate_data: str | None = None
    private_key_path: str | None = None
    private_key_data: str | None = None

    @classmethod
    def from_connection_info(cls, info: Any) -> Credentials:
        """From a ``kopf.ConnectionInfo`` (duck-typed: kopf has no type stubs)."""

        def text(value: Any) -> str | None:
            if value is None:
                return None
            return value.decode() if isinstance(value, bytes) else str(value)

        return cls(
            server=str(info.server).rstrip("/"),
            token=text(info.token),
            ca_path=text(info.ca_path),
            ca_data=text(info.ca_data),
            insecure=bool(info.insecure),
            certificate_path=text(info.certificate_path),
            certificate_data=text(info.certificate_data),
            private_key_path=text(info.private_key_path),
            private_key_data=text(info.private_key_data),
        )

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https"):
            return False
        if self.insecure:
            return False
        context = ssl.create_default_context(cafile=self.ca_path)
        if self.ca_data:
            context.load_verify_locations(cadata=base64.b64decode(self.ca_data).decode())
        cert, key = self.certificate_path, self.private_key_path
        if self.certificate_data or self.private_key_data:
            # ssl only loads client keys from files: a private temporary directory, removed at once.
            with tempfile.TemporaryDirectory(prefix="trainguard-tls-") as directory:
                cert = _spill(directory, "tls.crt", self.certificate_data) or cert
                key = _spill(directory, "tls.key", self.private_key_data) or key
                if cert:
                    context.load_cert_chain(cert, key)
        elif cert:
            context.load_cert_chain(cert, key)
        return context


def _spill(directory: str, name: str, data: str | None) -> str | None:
    if not data:
        return None
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(base64.b64decode(data))
    return path


class Api:
    """One HTTP session to the API server. Use as ``async with Api(credentials) as api``."""

    def __init__(self, credentials: Credentials, *, timeout_s: float = TIMEOUT_S) -> None:
        self.credentials = credentials
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self.calls = 0
        self.failures = 0

    async def __aenter__(self) -> Api:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            headers = {"Accept": "application/json", "User-Agent": "trainguard-operator"}
            if self.credentials.token:
                headers["Authorization"] = f"Bearer {self.credentials.token}"
            connector = aiohttp.TCPConnector(ssl=self.credentials.ssl_context())
            self._session = aiohttp.ClientSession(headers=headers, connector=connector, timeout=self._timeout)
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One call: the decoded JSON answer, or ApiError. Network errors stay ``aiohttp.ClientError``
        (or TimeoutError), so the caller sees what really happened."""
        url = self.credentials.server + path + (f"?{urlencode(dict(query))}" if query else "")
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else {}
        self.calls += 1
        async with self._open().request(method, url, data=data, headers=headers) as response:
            text = await response.text()
            if response.status >= 400:
                self.failures += 1
                reason, message = _status_of(text, response.reason or "")
                raise ApiError(response.status, reason, message)
            if not text:
                return {}
            decoded = json.loads(text)
            return decoded if isinstance(decoded, dict) else {"items": decoded}

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        return await self.request("GET", resource.path(namespace, name))

    async def list(
        self, resource: Resource, namespace: str | None = None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        query = {"labelSelector": label_selector} if label_selector else None
        answer = await self.request("GET", resource.path(namespace), query=query)
        items = answer.get("items") or []
        return [item for item in items if isinstance(item, dict)]

    async def create(self, resource: Resource, body: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        return await self.request("POST", resource.path(namespace), body=dict(body))

    async def patch(
        self,
        resource: Resource,
        name: str,
        body: Any,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        content_type: str = MERGE_PATCH,
    ) -> dict[str, Any]:
        return await self.request(
            "PATCH", resource.path(namespace, name, subresource), body=body, content_type=content_type
        )

    async def delete(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        return await self.request("DELETE", resource.path(namespace, name))


def _status_of(text: str, fallback: str) -> tuple[str, str]:
    """(reason, message) of a ``metav1.Status`` body; the raw text when it is not one."""
    try:
        status = json.loads(text)
    except ValueError:
        return fallback, text.strip()[:500]
    if not isinstance(status, dict):
        return fallback, text.strip()[:500]
    return str(status.get("reason") or fallback), str(status.get("message") or text.strip()[:500])
