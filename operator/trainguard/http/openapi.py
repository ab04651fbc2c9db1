"""The OpenAPI 3.1 document of ``/api/v1``, generated from ``http/models.py`` (one source).

The components are pydantic's JSON Schema of the response models (``models_json_schema``); the
paths below only name which model each path answers with. A test requests every path and
validates the real answers against these components, so the document and the server agree.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from pydantic.json_schema import models_json_schema

from trainguard import __version__
from trainguard.http import models

REF: Final = "#/components/schemas/{model}"


def _ref(model: type[Any]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def _answer(model: type[Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


_ERRORS: Final = {
    "400": _answer(models.Error, "bad input (unknown parameter, bad cursor, page size above 500, bad time)"),
    "401": _answer(models.Error, "no or invalid bearer token (when a token file is configured)"),
    "404": _answer(models.Error, "not found"),
    "503": _answer(models.Error, "the store or the engine is not available in this process"),
}
_WRITE_ERRORS: Final = {
    **_ERRORS,
    "403": _answer(models.Error, "read role, missing CSRF header or cross-origin request"),
    "409": _answer(models.Error, "refused: nothing of ours to undo, or the operator's RecoveryPolicy decides"),
}


def _query(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema or {"type": "string"}}


def _path(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": description, "schema": {"type": "string"}}


_PAGE: Final = [
    _query("limit", "page size, 1..500 (default 50)", {"type": "integer", "minimum": 1, "maximum": 500}),
    _query("cursor", "the 'next' value of the previous page (opaque)"),
]
_CSRF: Final = {"name": "X-Trainguard-Request", "in": "header", "required": True, "schema": {"const": "1"}}


def _get(model: type[Any], summary: str, parameters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"get": {"summary": summary, "parameters": parameters or [],
                    "responses": {"200": _answer(model, "OK"), **_ERRORS}}}


def _post(body: type[Any] | None, summary: str, parameters: list[dict[str, Any]]) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": summary, "parameters": [*parameters, _CSRF],
                                 "responses": {"200": _answer(models.MutationResult, "done"), **_WRITE_ERRORS}}
    if body is not None:
        operation["requestBody"] = {"required": body is not models.Acknowledge,
                                    "content": {"application/json": {"schema": _ref(body)}}}
    return {"post": operation}


@functools.cache
def document() -> dict[str, Any]:
    _, schema = models_json_schema([(m, "serialization") for m in models.MODELS], ref_template=REF)
    paths: dict[str, Any] = {
        "/api/v1/workloads": _get(models.WorkloadPage, "workloads, filtered, sorted and paged by the server", [
            _query("state", "comma-separated workload states"),
            _query("policy", "comma-separated policy names"),
            _query("mode", "monitor or action (effective mode)"),
            _query("scheduler", "scheduler name (alias: cluster)"),
            _query("cluster", "alias of scheduler"),
            _query("has_anomaly", "true or false", {"type": "boolean"}),
            _query("q", "case-insensitive text in id, job id, policy or comment"),
            _query("sort", "-last_seen (default), last_seen, id, -id, first_seen, -first_seen"),
            *_PAGE]),
        "/api/v1/workloads/{id}": _get(models.WorkloadDetail, "one workload: attempts and their timeline", [
            _path("id", "workload id (slashes allowed, e.g. slurm/cluster/42)")]),
        "/api/v1/workloads/{id}/acknowledge": _post(models.Acknowledge, "acknowledge a workload's anomalies", [
            _path("id", "workload id")]),
        "/api/v1/audit": _get(models.AuditPage, "audit search, newest first by default", [
            _query("workload", "workload id"),
            _query("attempt", "attempt number", {"type": "integer", "minimum": 0}),
            _query("kind", "comma-separated: anomaly, verdict, advice, action, outcome, watchdog"),
            _query("producer", "comma-separated: policy, watchdog, detector, api, operator"),
            _query("since", "ISO 8601, inclusive", {"type": "string", "format": "date-time"}),
            _query("until", "ISO 8601, exclusive", {"type": "string", "format": "date-time"}),
            _query("order", "desc (default, newest first) or asc"),
            *_PAGE]),
        "/api/v1/policies": _get(models.PolicyList, "policies: effective spec, mode, covered workloads"),
        "/api/v1/policies/{name}/mode": _post(models.ModeChange, "switch a policy's mode (standalone only)", [
            _path("name", "policy name")]),
        "/api/v1/nodes": _get(models.NodeList, "suspect/lemon history and our drains", [
            _query("since", "ISO 8601 (default: 30 days ago)", {"type": "string", "format": "date-time"})]),
        "/api/v1/nodes/{node}/undo-drain": _post(None, "resume a node we drained (never another's drain)", [
            _path("node", "node name")]),
        "/api/v1/nodes/{node}": _get(models.NodeDetail, "one node's lifecycle: state, history with evidence, incidents",
                                     [_path("node", "node name")]),
        "/api/v1/nodes/{node}/hold": _post(models.NodeDecision, "hold a node we took out of service for repair "
                                           "(no rule of time resumes it)", [_path("node", "node name")]),
        "/api/v1/nodes/{node}/return": _post(models.NodeDecision, "clear a node for return: the engine resumes it at "
                                             "its next sweep (ours only)", [_path("node", "node name")]),
        "/api/v1/goodput": _get(models.GoodputReport, "goodput: productive and lost time by cause (docs/goodput.md)", [
            _query("since", "ISO 8601: attempts running at or started after it",
                   {"type": "string", "format": "date-time"}),
            _query("by", "workload (default), category, node or policy"),
            _query("job_timeout", "the job's own hang timeout assumed without Trainguard, seconds (default 600)",
                   {"type": "number", "minimum": 0}),
            _query("manual_delay", "assumed manual requeue delay without Trainguard, seconds (default 1800)",
                   {"type": "number", "minimum": 0})]),
        "/api/v1/backtest": {"post": {
            "summary": "replay the recorded decisions under a changed policy (read role; changes nothing)",
            "parameters": [_CSRF],
            "requestBody": {"required": True,
                            "content": {"application/json": {"schema": _ref(models.BacktestRequest)}}},
            "responses": {"200": _answer(models.BacktestResult, "OK"), **_ERRORS,
                          "403": _answer(models.Error, "missing CSRF header or cross-origin request")}}},
        "/api/v1/actions": _get(models.ActionsState, "whether recoveries may change the scheduler now: the "
                                "cluster switch and the runtime pause"),
        "/api/v1/actions/pause": _post(models.PauseRequest, "pause every recovery action (no restart; audited)", []),
        "/api/v1/actions/resume": _post(None, "clear the runtime pause (audited)", []),
        "/api/v1/actions/breaker/reset": _post(models.PauseRequest, "close the blast-radius breaker an "
                                               "administrator's cap opened (audited; the reason says why)", []),
        "/api/v1/health": _get(models.EngineHealth, "engine health: scheduler/store reachability, loop lag, leader"),
        "/api/v1/whoami": _get(models.WhoAmI, "the caller's identity and role"),
        "/api/v1/scorecard": _get(models.Scorecard, "Monitor-mode advice scored by what happened next, per-policy "
                                  "readiness for Action (docs/scorecard.md)", [
            _query("policy", "only advice of this policy"), _query("workload", "only advice of this workload")]),
        "/api/v1/events": {"get": {
            "summary": "live audit records as Server-Sent Events (event: audit, data: an AuditItem)",
            "parameters": [_query("workload", "only this workload's records")],
            "responses": {"200": {"description": "text/event-stream",
                                  "content": {"text/event-stream": {"schema": {"type": "string"}}}}, **_ERRORS}}},
        "/api/v1/openapi.json": {"get": {"summary": "this document",
                                         "responses": {"200": {"description": "OpenAPI 3.1",
                                                               "content": {"application/json": {}}}}}},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "Trainguard API", "version": __version__,
                 "description": "Read what the recovery loop sees; switch, undo and acknowledge with the write role."},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {"schemas": schema.get("$defs", {}),
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
