"""The kopf side of the operator: its login, its handlers and its settings.

Place: the outermost layer of the operator shell, called by kopf. The handlers are registered on a
registry of their own (no module-level decorators) and only hand what kopf saw to the ``Shell``:

- RecoveryPolicy objects are watched with ``on.event`` (no finalizers, no annotations written on
  them), validated by ``k8s/policies.py`` and the accepted ones hot-swapped into the engine (name
  clashes across namespaces resolved by one rule there);
- WorkloadRecovery objects are watched for their ``spec.overrides`` (``recoveries.py``);
- the probes report ``trainguard.health`` (the HTTP probes are served by ``trainguard.http``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import kopf

from trainguard.k8s import policies
from trainguard.k8s.operator.config import GROUP, VERSION, OperatorConfig

if TYPE_CHECKING:
    from trainguard.k8s.operator.shell import Shell

logger = logging.getLogger("trainguard.operator")


def login(settings: kopf.OperatorSettings) -> Any:
    """The same credentials kopf uses: the kubeconfig ($KUBECONFIG) if any, else the pod's
    ServiceAccount. A ``kopf.ConnectionInfo``."""
    info = kopf.login_with_kubeconfig(settings=settings) or kopf.login_with_service_account(settings=settings)
    if info is None:
        raise kopf.LoginError("no credentials: set KUBECONFIG or run in a pod with a ServiceAccount token")
    return info


def build_registry(shell: Shell) -> kopf.OperatorRegistry:
    """The handlers, registered on a registry of their own (no module-level decorators)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def _login(settings: kopf.OperatorSettings, **_: Any) -> Any:
        return login(settings)

    @kopf.on.probe(id="readiness", registry=registry)
    def _readiness(**_: Any) -> dict[str, Any]:
        # Shown by kopf's own liveness endpoint (--liveness); the probes use trainguard.http.
        return shell.health.readiness()[1]

    @kopf.on.probe(id="heartbeat", registry=registry)
    def _heartbeat(**_: Any) -> dict[str, Any]:
        alive, view = shell.health.liveness()
        if not alive:
            raise kopf.PermanentError(view["reason"])
        return view

    @kopf.on.cleanup(registry=registry)
    async def _cleanup(**_: Any) -> None:
        await shell.close()

    @kopf.on.event(GROUP, VERSION, "recoverypolicies", registry=registry)
    async def _policy(*, type: str, body: kopf.Body, **_: Any) -> None:
        # on.event: no finalizer and no progress annotations are ever written on the object.
        entry = policies.read(dict(body))
        if type == "DELETED":
            shell.book.remove(entry.key)
            logger.info("RecoveryPolicy %s/%s deleted", *entry.key)
        else:
            old = shell.book.entries.get(entry.key)
            shell.book.put(entry)
            if old is not None and old.generation == entry.generation and old.error == entry.error:
                return  # only our own status write came back
            if entry.error:
                logger.warning("RecoveryPolicy %s/%s is invalid: %s", *entry.key, entry.error)
            else:
                logger.info("RecoveryPolicy %s/%s generation %s accepted", *entry.key, entry.generation)
        shell.policies_changed()

    @kopf.on.event(GROUP, VERSION, "workloadrecoveries", registry=registry)
    async def _recovery(*, type: str, body: kopf.Body, **_: Any) -> None:
        shell.recoveries.override_mode(dict(body), deleted=type == "DELETED")

    return registry


def configure(settings: kopf.OperatorSettings, config: OperatorConfig) -> None:
    """kopf settings of the operator."""
    # With a fixed list of namespaces there is nothing to scan for (no globs), and our handlers name
    # their resources exactly: no namespace listing, no CRD discovery needed.
    settings.scanning.disabled = not config.clusterwide
    settings.posting.enabled = False  # our own Events only (k8s/events.py), not kopf's log lines
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
