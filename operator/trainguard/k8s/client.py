"""The one place Trainguard gets a Kubernetes API client: ``kubernetes_asyncio``, never a client of our own.

Place in the loop: under the Kubernetes shell (``k8s/``) and the Kubernetes workload adapter. Every
module that reads or writes the API takes a ``kubernetes_asyncio.client.ApiClient`` built here and
wraps it in the typed group APIs (``CoreV1Api``, ``CoordinationV1Api``, ``CustomObjectsApi``...):
watches, pod logs, Leases, Nodes, Events and the reviews all come from the well-kept library that
speaks the same API as the official ``kubernetes`` client, rather than from HTTP calls we maintain.

Two ways in, one client class:

- ``load_api_client``: in-cluster config (ServiceAccount token, refreshed from its file as the kubelet
  rotates it) when running in a pod, else a kubeconfig (the given path, ``$KUBECONFIG``,
  ``~/.kube/config``; exec plugins and OIDC work as with kubectl). CLI commands, tests and adapters use it;
- ``from_connection_info``: the operator, which runs under kopf, builds its client from the very
  ``kopf.ConnectionInfo`` kopf logged in with, so kopf's watches and our writes act as one identity.

What the library leaves to the caller, and this module settles once:

- time bound: kubernetes_asyncio sends a call without a timeout unless told; ``ApiClient`` bounds
  every call it is not told a bound for (``time_bound``): one that reads a whole answer by
  ``TIMEOUT_S``, whether the library reads it or the caller does (``_preload_content=False``, read
  with ``read_body``): a hung connection must not stall the status loop or a recovery step; a watch
  by its own ``timeoutSeconds`` plus ``STREAM_MARGIN_S`` (the server ends it by then); a ``follow``
  log stream, which is silent for as long as its container prints nothing, only while connecting.
  A call that runs out of time raises ``TimeoutError`` naming the request;
- patch type: the library picks the Content-Type of a PATCH from the body (strategic merge for a dict
  on built-in kinds, JSON patch for custom objects), so every patch goes through ``merge_patch``:
  RFC 7386, where ``null`` deletes a key, on every kind;
- times: bodies are plain dicts with times formatted by us (``body_of``), since the library's
  model serialisation drops the fraction of a ``MicroTime`` at a whole second;
- errors: ``ApiException`` with the HTTP status for every non-2xx answer (it never retries by itself):
  the library raises it for an answer it reads, ``ApiClient.request`` for one the caller reads;
  ``status_of``, ``is_conflict``... read it, and ``message_of`` the server's Status.

Kept of the retired hand-written client (``k8s/api.py``) only what the library has no equivalent
for: turning kopf's ``ConnectionInfo`` into a configuration (the library reads kubeconfigs and the
in-cluster files, not kopf's login), including writing inline CA/client-key data to private files.
One difference from it: like kubectl and client-go, the library honours ``HTTPS_PROXY``/``NO_PROXY``
from the environment.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar, cast

import aiohttp
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException

__all__ = [  # ApiException is re-exported: it is what callers catch
    "API_ERRORS", "JSON_PATCH", "MERGE_PATCH", "STREAM_MARGIN_S", "TIMEOUT_S", "ApiClient", "ApiException", "body_of",
    "configuration_of", "from_connection_info", "in_cluster", "is_conflict", "is_gone", "is_not_found", "is_retryable",
    "load_api_client", "merge_patch", "message_of", "read_body", "status_of", "time_bound", "to_dict",
    "verification_failed",
]

MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
TIMEOUT_S: Final = 30.0
"""Total time of one API call that reads a whole answer; the apiserver answers in milliseconds."""
STREAM_MARGIN_S: Final = 30.0
"""How long past its own ``timeoutSeconds`` a watch may stay open before the client gives up on it
(the server ends a watch at ``timeoutSeconds``: a watch still open past it is a silent connection)."""
USER_AGENT: Final = "trainguard-operator"

API_ERRORS: Final[tuple[type[BaseException], ...]] = (ApiException, aiohttp.ClientError, TimeoutError)
"""What one API call raises when the server refused it or could not be reached: the set callers catch
where a failed call is logged and retried in the next round rather than crashing the loop."""


class ApiClient(k8s.ApiClient):
    """kubernetes_asyncio's ApiClient with a time bound on every call (``time_bound``).

    Close it (``await client.close()`` or ``async with``): it owns an aiohttp session."""

    def __init__(self, configuration: k8s.Configuration, *, timeout_s: float = TIMEOUT_S) -> None:
        super().__init__(configuration)
        self.timeout_s = timeout_s
        self.user_agent = USER_AGENT

    async def request(  # noqa: PLR0917 -- the signature of the method it overrides
        self, method: str, url: str, query_params: Any = None, headers: Any = None, post_params: Any = None,
        body: Any = None, _preload_content: bool = True, _request_timeout: Any = None,
    ) -> Any:
        """The library's request, bounded by ``time_bound`` unless the caller set a bound (the library's
        default is no bound at all). With ``_preload_content=False`` the bound covers the caller's read
        of the body too (aiohttp's total timeout runs until the response is released)."""
        if _request_timeout is None:
            _request_timeout = time_bound(query_params, self.timeout_s)
        try:
            response = await super().request(method, url, query_params=query_params, headers=headers,
                                             post_params=post_params, body=body, _preload_content=_preload_content,
                                             _request_timeout=_request_timeout)
        except TimeoutError as exc:
            if isinstance(exc, aiohttp.ClientError):  # aiohttp's own, which says what ran out
                raise
            raise TimeoutError(f"Kubernetes API {method} {url}: no answer within {_seconds(_request_timeout)}") from exc
        if not _preload_content and not 200 <= int(getattr(response, "status", 200)) <= 299:
            # The library checks the status only of an answer it reads itself: unchecked, a 404 or a 403
            # would be read by the caller as an object (or an empty listing) made of the server's Status.
            error = ApiException(status=response.status, reason=str(getattr(response, "reason", "") or ""))
            error.body = await read_body(response)
            raise error
        return response


def time_bound(query_params: Any, timeout_s: float) -> float | aiohttp.ClientTimeout:
    """The bound of one call with these query parameters: ``timeout_s`` for a call that reads a whole
    answer; a watch's ``timeoutSeconds`` + ``STREAM_MARGIN_S``; for a stream without one (a ``follow``
    log: silent while its container prints nothing) only the connection, by ``timeout_s``."""
    pairs = query_params.items() if isinstance(query_params, Mapping) else (query_params or [])
    query = {str(key): value for key, value in pairs}
    if not any(str(query.get(key)).lower() == "true" for key in ("watch", "follow")):
        return timeout_s
    seconds = query.get("timeoutSeconds")
    if seconds:
        return float(seconds) + STREAM_MARGIN_S
    return aiohttp.ClientTimeout(connect=timeout_s, sock_connect=timeout_s)


def _seconds(bound: Any) -> str:
    total = bound.total if isinstance(bound, aiohttp.ClientTimeout) else bound
    if isinstance(bound, tuple):
        total = sum(part or 0 for part in bound)
    return f"{total:g} s" if isinstance(total, int | float) else "its time bound"


async def read_body(response: Any) -> bytes:
    """The body of an answer requested with ``_preload_content=False``, read within the call's bound
    (``ApiClient.request``), the response released; TimeoutError names the request when it runs out."""
    try:
        return bytes(await response.read())
    except TimeoutError as exc:
        if isinstance(exc, aiohttp.ClientError):
            raise
        raise TimeoutError(f"Kubernetes API {response.method} {response.url}: answer not complete within "
                           "its time bound") from exc
    finally:
        response.release()


def in_cluster() -> bool:
    """Whether this process runs in a pod with a mounted ServiceAccount (what client-go checks too)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        "/var/run/secrets/kubernetes.io/serviceaccount/token")


async def load_api_client(kubeconfig: str | None = None, *, max_connections: int | None = None) -> ApiClient:
    """A client with the process's own credentials: the pod's ServiceAccount (in-cluster config) when
    running in a pod and no ``kubeconfig`` is named, else that kubeconfig (None: ``$KUBECONFIG``, then
    ``~/.kube/config``), resolved by kubernetes_asyncio as kubectl would (contexts, exec plugins, OIDC).

    In-cluster first because a pod's ServiceAccount is the identity the shipped RBAC grants; a
    kubeconfig in a pod is an exception the caller states by passing it. ``max_connections``: the
    connection pool's size (the library's default is 100), for a client holding long-lived streams."""
    configuration = k8s.Configuration()
    if max_connections is not None:
        configuration.connection_pool_maxsize = max_connections
    if kubeconfig is None and in_cluster():
        load_incluster: Any = k8s_config.load_incluster_config  # untyped in the library
        load_incluster(client_configuration=configuration)
    else:
        # $KUBECONFIG read now: the library reads it once, when it is imported
        await k8s_config.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG") or None,
                                          client_configuration=configuration)
    return ApiClient(configuration)


def from_connection_info(info: Any) -> ApiClient:
    """A client with the credentials kopf logged in with (``configuration_of``)."""
    return ApiClient(configuration_of(info))


def configuration_of(info: Any) -> k8s.Configuration:
    """The client configuration of the credentials kopf logged in with (a ``kopf.ConnectionInfo``,
    duck-typed since kopf has no type stubs): server, bearer token, CA, client certificate, TLS flags,
    proxy (basic auth is not carried over: Kubernetes removed it in 1.19). Used by the operator, so
    its own writes act as the identity kopf watches with, whether that came from a kubeconfig or from
    the pod's ServiceAccount."""
    configuration = k8s.Configuration(host=str(info.server).rstrip("/"))
    token = _text(info.token)
    if token:
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": _text(getattr(info, "scheme", None)) or "Bearer"}
    configuration.verify_ssl = not bool(info.insecure)
    configuration.ssl_ca_cert = _file(info.ca_path, info.ca_data, "ca.crt")
    configuration.cert_file = _file(info.certificate_path, info.certificate_data, "tls.crt")
    configuration.key_file = _file(info.private_key_path, info.private_key_data, "tls.key")
    if getattr(info, "proxy_url", None):
        configuration.proxy = _text(info.proxy_url)
    return configuration


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


_SPILLED: dict[bytes, str] = {}


def _file(path: Any, data: Any, name: str) -> str | None:
    """A file path for ``ssl``, which loads CAs and client keys only from files: the given path, or
    the base64 ``*-data`` of a kubeconfig written once per content into a private (0600) file that
    lives as long as the process and is removed at exit (as kubernetes_asyncio's own kubeconfig
    loader does with the same data)."""
    if path:
        return os.fsdecode(path)
    if not data:
        return None
    raw = base64.b64decode(data)
    spilled = _SPILLED.get(raw)
    if spilled is None:
        if not _SPILLED:
            atexit.register(_remove_spilled)
        fd, spilled = tempfile.mkstemp(prefix="trainguard-", suffix=f"-{name}")
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
        _SPILLED[raw] = spilled
    return spilled


def _remove_spilled() -> None:
    for spilled in _SPILLED.values():
        with contextlib.suppress(OSError):
            os.remove(spilled)
    _SPILLED.clear()


# ---------------------------------------------------------------------------- bodies

T = TypeVar("T")


async def merge_patch(patch: Callable[..., Awaitable[T]], *args: Any, body: Mapping[str, Any]) -> T:
    """Call a generated ``patch_*`` method (``args``: its arguments before the body) as a JSON merge
    patch. Left to itself the library would send a dict as a strategic merge patch on built-in kinds
    and as a JSON patch (which must be a list: the server refuses it) on custom objects; the merge
    patch means the same on every kind: a key set to None is deleted, other keys are left alone."""
    call: Any = patch
    return cast(T, await call(*args, dict(body), _content_type=MERGE_PATCH))


def body_of(obj: Mapping[str, Any]) -> Any:
    """A plain JSON object as the body of a generated create method, which its type hints ask for as
    a model. The library sends a dict as it is; a model would turn datetimes into ``isoformat()``,
    which drops the fraction at a whole second, and the apiserver refuses such a ``MicroTime``
    (``Lease.spec.renewTime``, ``Event.eventTime``): we format times ourselves."""
    return dict(obj)


# ---------------------------------------------------------------------------- errors


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an API error; None for network errors and timeouts."""
    status = getattr(exc, "status", None) if isinstance(exc, ApiException) else None
    return status if isinstance(status, int) else None


def is_not_found(exc: BaseException) -> bool:
    """404: the object (or its namespace) is gone."""
    return status_of(exc) == 404


def is_conflict(exc: BaseException) -> bool:
    """409: a stale resourceVersion, or AlreadyExists on create."""
    return status_of(exc) == 409


def is_gone(exc: BaseException) -> bool:
    """410: a watch's resourceVersion is too old; list again."""
    return status_of(exc) == 410


def is_retryable(exc: BaseException) -> bool:
    """Throttling and server-side failures are worth another try; other refusals are not."""
    status = status_of(exc)
    return status is not None and (status == 429 or status >= 500)


def message_of(exc: BaseException) -> str:
    """The server's ``metav1.Status`` message of an API error (the raw text when the body is not
    one); ``str(exc)`` for anything else. One line, bounded, for logs and reasons."""
    if not isinstance(exc, ApiException):
        return str(exc)
    body = exc.body.decode(errors="replace") if isinstance(exc.body, bytes) else str(exc.body or "")
    try:
        decoded = json.loads(body)
    except ValueError:
        decoded = None
    message = decoded.get("message") if isinstance(decoded, dict) else None
    text = str(message or body.strip() or exc.reason or "")[:500]
    return f"HTTP {exc.status} {exc.reason}: {text}"


def verification_failed(status: int, message: str) -> ApiException:
    """An ``ApiException`` for a write the server accepted but a fresh read does not show: callers
    treat it like the server refusing the write (logged, retried next round)."""
    return ApiException(status=status, reason=message)


def to_dict(api: ApiClient, model: Any) -> dict[str, Any]:
    """A typed model as the API's JSON object (camelCase keys), for code that reads plain mappings."""
    result = api.sanitize_for_serialization(model)
    return result if isinstance(result, dict) else {}
