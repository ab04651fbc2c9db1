"""Pydantic JSON schema -> Kubernetes structural OpenAPI v3 schema: the one converter.

Every CRD schema (the RecoveryPolicy spec in ``policy.model``, the status and WorkloadRecovery
schemas in ``k8s.crds``) is derived from its pydantic model through this function, so defaults,
enums and bounds have a single source. Pure: dicts in, dicts out.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel


def structural_schema(model: type[BaseModel], *, defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A Kubernetes structural schema of ``model`` (aliases, validation mode).

    ``$ref`` is inlined, ``anyOf [X, null]`` becomes ``X`` + ``nullable: true``, ``const`` a
    one-value enum, numeric exclusive bounds OpenAPI 3.0's boolean form; titles, null defaults and
    ``additionalProperties: false`` (the apiserver prunes unknown fields instead) are dropped.
    ``oneOf``/``allOf``/``not`` and ambiguous ``anyOf`` raise ValueError at generation time.

    With ``defaults`` (the model's default instance, dumped by alias), list defaults are taken from
    it and nested objects without required fields get ``default: {}``, so the apiserver fills in
    their fields' defaults when the object is omitted.
    """
    raw = model.model_json_schema(by_alias=True, mode="validation")
    definitions: dict[str, Any] = raw.pop("$defs", {})
    result: dict[str, Any] = _convert(raw, definitions, defaults, fill=defaults is not None)
    return result


def _convert(node: Any, definitions: Mapping[str, Any], defaults: Any, *, fill: bool) -> Any:
    if not isinstance(node, dict):
        return node
    node = dict(node)
    ref = node.pop("$ref", None)
    if ref is not None:
        node = {**copy.deepcopy(definitions[ref.rsplit("/", 1)[-1]]), **node}
    any_of = node.pop("anyOf", None)
    if any_of is not None:
        options = [option for option in any_of if option.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express anyOf {any_of!r} as a structural schema")
        node = {**_convert(options[0], definitions, defaults, fill=fill), **node}
        if len(options) != len(any_of):
            node["nullable"] = True
    for keyword in ("oneOf", "allOf", "not"):
        if keyword in node:
            raise ValueError(f"cannot express {keyword} in a structural schema: {node!r}")
    if "const" in node:
        node["enum"] = [node.pop("const")]
    for bound, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        value = node.get(bound)
        if isinstance(value, int | float) and not isinstance(value, bool):
            node[inclusive] = value
            node[bound] = True
    if node.get("additionalProperties") is False:
        del node["additionalProperties"]
    node.pop("title", None)
    if "default" in node and node["default"] is None:
        del node["default"]
    result: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            nested = defaults if isinstance(defaults, dict) else {}
            result[key] = {
                name: _convert(prop, definitions, nested.get(name), fill=fill) for name, prop in value.items()
            }
        elif key in ("items", "additionalProperties"):
            result[key] = _convert(value, definitions, None, fill=fill)
        else:
            result[key] = value
    if fill:
        if result.get("type") == "object" and "properties" in result and not result.get("required"):
            result.setdefault("default", {})
        elif "default" not in result and isinstance(defaults, list):
            result["default"] = defaults
    return result
