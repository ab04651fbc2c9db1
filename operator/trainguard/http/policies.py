"""``/api/v1/policies``: the running policy set with each policy's effective mode, and the mode switch.

The effective mode is ``act.switch.effective_mode`` (the one rule: a declared ``Action`` acts only
while this process runs with the cluster-wide switch on); this module applies it for the API's
views, the workloads list and its ``mode`` filter included (``action_policies``, ``mode_of``).

A mode switch (write role) goes through ``Engine.update_policies``, like any other change of the
policy set, and is audited. In the operator the RecoveryPolicy object decides the mode, so the
switch is refused there (409).

Place: a route module of ``http.api`` (which mounts it).
"""

from __future__ import annotations

import dataclasses
import logging
import time

from aiohttp import web

from trainguard.act import switch
from trainguard.http import auth, models
from trainguard.http.common import STATE, ApiError, State, answer, audit_item, query, read_body
from trainguard.model import vocab

logger = logging.getLogger("trainguard.http.api")


def _acting(state: State, declared: vocab.Mode) -> bool:
    return switch.effective_mode(declared, state.allow_action) is vocab.Mode.ACTION


def action_policies(state: State) -> list[str] | None:
    """Names of the policies whose effective mode is Action; None when no engine runs here."""
    engine = state.backend.engine
    if engine is None:
        return None
    return [p.name for p in engine.policies.policies if _acting(state, p.spec.mode)]


def mode_of(state: State, workload: str, policy: str) -> models.ModeName:
    """A workload's effective mode: its tracked runtime's (the engine applied the rule, and any
    per-workload override, when it resolved the spec), else its policy's; unknown without an engine."""
    engine = state.backend.engine
    if engine is None:
        return "unknown"
    runtime = engine.runtimes.get(workload)
    if runtime is not None and runtime.spec is not None:
        return "action" if runtime.spec.mode == vocab.Mode.ACTION else "monitor"
    found = engine.policies.get(policy) if policy else None
    if found is None:
        return "unknown"
    return "action" if _acting(state, found.spec.mode) else "monitor"


async def list_policies(request: web.Request) -> web.Response:
    state = request.app[STATE]
    query(request, ())
    engine = state.backend.engine
    if engine is None:
        raise ApiError(503, "no engine runs in this process (a standby replica, or starting up)")
    covered = await state.queries().covered()
    items = []
    for policy in engine.policies.policies:
        declared = policy.spec.mode
        acting = _acting(state, declared)
        items.append(models.PolicyItem(
            name=policy.name, declared_mode="Action" if declared == vocab.Mode.ACTION else "Monitor",
            mode="action" if acting else "monitor", mode_switched_by=state.switched_by.get(policy.name),
            covered_workloads=covered.get(policy.name, 0),
            status="acting" if acting else ("monitoring: the cluster-wide Action switch is off"
                                            if declared == vocab.Mode.ACTION else "monitoring"),
            spec=policy.spec.model_dump(mode="json", by_alias=True),
        ))
    return answer(models.PolicyList(items=items, action_switch=state.allow_action))


async def set_policy_mode(request: web.Request) -> web.Response:
    state = request.app[STATE]
    query(request, ())
    name = request.match_info["name"]
    change: models.ModeChange = await read_body(request, models.ModeChange)
    if not state.policies_editable:
        raise ApiError(409, f"in the operator the RecoveryPolicy object decides the mode: kubectl patch the "
                            f"RecoveryPolicy behind {name!r} (spec.mode)")
    engine = state.backend.engine
    if engine is None:
        raise ApiError(503, "no engine runs in this process")
    policy = engine.policies.get(name)
    if policy is None or policy.name != name:
        raise ApiError(404, f"no policy {name[:200]!r}")
    mode = vocab.Mode.ACTION if change.mode.lower() == "action" else vocab.Mode.MONITOR
    who = auth.principal_of(request)
    before = policy.spec.mode
    updated = policy.model_copy(update={"spec": policy.spec.model_copy(update={"mode": mode})})
    engine.update_policies(dataclasses.replace(
        engine.policies, policies=tuple(updated if p is policy else p for p in engine.policies.policies)))
    state.switched_by[name] = who.user
    note = " (the cluster-wide Action switch is off: the effective mode stays Monitor)" \
        if mode is vocab.Mode.ACTION and not _acting(state, mode) else ""
    record = await state.store().record_api_action(
        workload=f"policy:{name}", attempt=None, by=who.user, at=time.time(),
        payload={"operation": "set_policy_mode", "status": "done",
                 "arguments": {"policy": name, "from": before.value, "to": mode.value}})
    logger.warning("policy %s switched from %s to %s by %s through the API%s", name, before.value, mode.value,
                   who.user, note)
    return answer(models.MutationResult(ok=True, message=f"policy {name} is now {mode.value}{note}",
                                        audit=audit_item(record)))


ROUTES = (
    ("GET", "/policies", list_policies),
    ("POST", "/policies/{name}/mode", set_policy_mode),
)
