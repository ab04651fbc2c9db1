"""RecoveryPolicySpec: defaults, camelCase aliases, strictness, and the structural CRD schema."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from trainguard.model import vocab
from trainguard.policy import model


def test_defaults_are_the_documented_safe_ones() -> None:
    spec = model.RecoveryPolicySpec()
    assert spec.mode == vocab.Mode.MONITOR
    selector = model.RecoveryPolicySpec.model_json_schema(by_alias=True)["$defs"]["Selector"]
    assert "optInTag" not in selector["properties"]  # the opt-in word is fixed: "trainguard"
    assert (spec.retries.max_retries, spec.retries.max_attempts_without_checkpoint) == (3, 2)
    assert spec.detection.hang_timeout == 1800.0
    assert spec.detection.throughput_drop_action == "off"
    assert spec.exclusion.exclude_on_hardware is True
    assert spec.exclusion.lemon_node_window == 7 * 86400.0
    assert spec.exclusion.drain_lemon_nodes is False
    assert spec.actions.allowed == [model.ActionName.REQUEUE, model.ActionName.STOP]
    assert (spec.blast_radius.max_actions_per_hour, spec.blast_radius.max_drained_share) == (20, 0.1)
    assert spec.watchdog.deadline == 300.0
    assert spec.attribution.url is None and spec.attribution.timeout == 5.0
    assert spec.do_not_requeue_exit_codes == [93]
    assert spec.application_error_action == "requeue"


@pytest.mark.parametrize(
    "line",
    ["saved checkpoint to /ckpt/iter_100", "Saving checkpoint at iteration 2000", "successfully saved checkpoint 7"],
)
def test_default_checkpoint_regex_matches_common_lines(line: str) -> None:
    assert re.search(model.RecoveryPolicySpec().detection.checkpoint_regex, line)


def test_camel_case_in_snake_case_out_and_round_trip() -> None:
    spec = model.RecoveryPolicySpec.model_validate(
        {"mode": "Action", "retries": {"maxRetries": 5}, "detection": {"hangTimeout": "1h30m"}}
    )
    assert spec.retries.max_retries == 5
    assert spec.detection.hang_timeout == 5400.0
    dumped = spec.model_dump(by_alias=True, mode="json")
    assert dumped["detection"]["hangTimeout"] == "1h30m"
    assert model.RecoveryPolicySpec.model_validate(json.loads(json.dumps(dumped))) == spec


@pytest.mark.parametrize(
    ("document", "location"),
    [
        ({"retries": {"maxRetriez": 1}}, ("retries", "maxRetriez")),
        ({"mode": "action"}, ("mode",)),
        ({"retries": {"maxRetries": -1}}, ("retries", "maxRetries")),
        ({"detection": {"hangTimeout": 30}}, ("detection", "hangTimeout")),
        ({"detection": {"throughputDropThreshold": 1.5}}, ("detection", "throughputDropThreshold")),
        ({"detection": {"checkpointRegex": "(?=x)saved"}}, ("detection", "checkpointRegex")),
        ({"actions": {"allowed": ["reboot"]}}, ("actions", "allowed", 0)),
        ({"doNotRequeueExitCodes": [300]}, ("doNotRequeueExitCodes", 0)),
        ({"attribution": {"url": "file:///etc/passwd"}}, ("attribution", "url")),
        ({"retries": {"backoff": {"initialSeconds": 100, "maxSeconds": 10}}}, ("retries", "backoff")),
    ],
)
def test_invalid_fields_are_rejected_with_their_path(document: dict[str, Any], location: tuple[Any, ...]) -> None:
    with pytest.raises(ValidationError) as caught:
        model.RecoveryPolicySpec.model_validate(document)
    assert caught.value.errors()[0]["loc"] == location


def test_policy_name_comes_from_selector_or_metadata() -> None:
    plain = model.RecoveryPolicy(metadata=model.Metadata(name="gpu"))
    named = model.RecoveryPolicy(
        metadata=model.Metadata(name="gpu"), spec=model.RecoveryPolicySpec(selector=model.Selector(policy_name="big"))
    )
    assert (plain.name, named.name) == ("gpu", "big")


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for key, value in node.get("properties", {}).items():
            found.extend(_walk(value, f"{path}.{key}"))
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                found.extend(_walk(node[key], f"{path}[{key}]"))
    return found


def test_crd_schema_is_structural() -> None:
    schema = model.crd_openapi_schema()
    text = json.dumps(schema)
    for forbidden in ('"$ref"', '"$defs"', '"anyOf"', '"oneOf"', '"allOf"', '"const"', '"title"'):
        assert forbidden not in text, forbidden
    for path, node in _walk(schema):
        assert "type" in node, f"{path} has no type"
        assert node.get("additionalProperties") is not False, path
        if "default" in node:
            assert node["default"] is not None, path
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            if bound in node:
                assert node[bound] is True, path
    assert schema["properties"]["detection"]["properties"]["progressRegex"]["nullable"] is True
    assert schema["properties"]["retries"]["default"] == {}


def test_crd_schema_defaults_equal_model_defaults() -> None:
    schema = model.crd_openapi_schema()
    dumped = model.RecoveryPolicySpec().model_dump(by_alias=True, mode="json")
    for section in ("retries", "detection", "exclusion", "blastRadius", "watchdog"):
        for field, value in dumped[section].items():
            prop = schema["properties"][section]["properties"][field]
            if value is None:
                assert "default" not in prop, f"{section}.{field}: null defaults are dropped"
                continue
            if isinstance(value, dict | list) and not value:
                continue
            if isinstance(value, dict):
                assert prop["default"] == {}
            else:
                assert prop["default"] == value, f"{section}.{field}"
    assert schema["properties"]["actions"]["properties"]["allowed"]["default"] == ["requeue", "stop"]
    assert schema["properties"]["doNotRequeueExitCodes"]["default"] == [93]


def _openapi_validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    """A Draft 4 validator (OpenAPI 3.0's base) where ``nullable: true`` also admits null."""

    def widen(node: Any) -> Any:
        if isinstance(node, dict):
            node = {key: widen(value) for key, value in node.items()}
            if node.pop("nullable", False):
                node["type"] = [node["type"], "null"]
                if "enum" in node:
                    node["enum"] = [*node["enum"], None]
        return node

    return jsonschema.Draft4Validator(widen(copy.deepcopy(schema)))


SAMPLES: list[dict[str, Any]] = [
    {},
    {"mode": "Action", "retries": {"maxRetries": 5, "backoff": {"initialSeconds": 10, "factor": 1.5}}},
    {
        "selector": {"policyName": None, "partitions": ["gpu"], "namespaces": ["ml"]},
        "detection": {
            "hangTimeout": "45m",
            "progressRegex": "iteration [0-9]+",
            "throughputDropAction": "requeue",
            "extraPatterns": [
                {
                    "id": "site.ib_flap",
                    "category": "nccl_network_ib",
                    "attribution_hint": "hardware",
                    "severity": "error",
                    "regex": "mlx5_[0-9]+: link down",
                    "extract": {"host": "^([a-z0-9-]+):"},
                }
            ],
        },
        "exclusion": {"drainLemonNodes": True, "lemonNodeWindow": "3d"},
        "actions": {"allowed": ["requeue", "stop", "drainNode"]},
        "attribution": {"url": "http://attrib.example:8080/v1/attribute", "timeout": "2s"},
        "doNotRequeueExitCodes": [93, 42],
    },
]


@pytest.mark.parametrize("sample", SAMPLES)
def test_valid_samples_pass_both_the_model_and_the_crd_schema(sample: dict[str, Any]) -> None:
    model.RecoveryPolicySpec.model_validate(sample)
    _openapi_validator(model.crd_openapi_schema()).validate(sample)


@pytest.mark.parametrize(
    "sample",
    [
        {"mode": "Sometimes"},
        {"retries": {"maxRetries": 1000}},
        {"detection": {"hangTimeout": "30"}},
        {"detection": {"throughputDropThreshold": 0}},
        {"actions": {"allowed": ["reboot"]}},
        {"exclusion": {"maxExcludedNodesPerJob": "two"}},
    ],
)
def test_invalid_samples_fail_both_the_model_and_the_crd_schema(sample: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        model.RecoveryPolicySpec.model_validate(sample)
    assert list(_openapi_validator(model.crd_openapi_schema()).iter_errors(sample))
