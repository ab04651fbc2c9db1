"""The generated CRDs: committed copy up to date, valid apiextensions/v1, structural, and the
examples in examples/ valid against them (jsonschema) and against the pydantic models."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from trainguard.k8s import crds, recovery
from trainguard.model import vocab
from trainguard.policy import loader
from trainguard.policy import model as policy_model

REPO = Path(__file__).resolve().parents[3]
CRDS_DIR = REPO / "crds"
EXAMPLES = REPO / "examples"
KUBE_VERSION = "1.36.0"
"""Schemas of kubernetes-validate to check against: the version hack/local-kube.sh builds."""

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def load(path: Path) -> Any:
    with path.open(encoding="utf-8") as stream:
        return yaml.safe_load(stream)


def committed_crds() -> dict[str, dict[str, Any]]:
    """Kind -> CRD document, read from crds/."""
    documents = [load(path) for path in sorted(CRDS_DIR.glob("trainguard.dev_*.yaml"))]
    return {doc["spec"]["names"]["kind"]: doc for doc in documents}


def schema_of(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = committed_crds()[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def to_json_schema(node: Any) -> Any:
    """OpenAPI v3.0 (Kubernetes flavour) -> JSON Schema draft 4: ``nullable`` becomes a null type,
    ``x-kubernetes-*`` extensions are dropped (the boolean exclusive bounds are draft 4 already)."""
    if isinstance(node, list):
        return [to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    result = {key: to_json_schema(value) for key, value in node.items() if not key.startswith("x-kubernetes-")}
    if result.pop("nullable", False):
        result["type"] = [result["type"], "null"]
        if "enum" in result:
            result["enum"] = [*result["enum"], None]
    return result


def validator(kind: str) -> jsonschema.Draft4Validator:
    return jsonschema.Draft4Validator(
        to_json_schema(schema_of(kind)), format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER
    )


def examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


# --- generation -------------------------------------------------------------------------------


def test_regenerating_gives_no_diff(tmp_path: Path) -> None:
    assert crds.main(["--out", str(tmp_path)]) == 0
    generated = sorted(path.name for path in tmp_path.iterdir())
    assert generated == sorted(path.name for path in CRDS_DIR.iterdir())
    for name in generated:
        assert (tmp_path / name).read_bytes() == (CRDS_DIR / name).read_bytes(), f"crds/{name}: run hack/gen-crds"


def test_check_mode_passes_on_the_repository() -> None:
    assert crds.main(["--out", str(CRDS_DIR), "--check"]) == 0


def test_check_mode_fails_on_an_edited_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert crds.main(["--out", str(tmp_path)]) == 0
    edited = tmp_path / "trainguard.dev_workloadrecoveries.yaml"
    edited.write_text(edited.read_text(encoding="utf-8").replace("- recoveries", "- recoverys"), encoding="utf-8")
    (tmp_path / "trainguard.dev_old.yaml").write_text("{}\n", encoding="utf-8")
    assert crds.main(["--out", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert re.search(r"^-\s+- recoverys$", err, re.MULTILINE)
    assert re.search(r"^\+\s+- recoveries$", err, re.MULTILINE)
    assert "stale" in err and "trainguard.dev_old.yaml" in err


def test_check_mode_reports_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert crds.main(["--out", str(tmp_path / "absent"), "--check"]) == 1
    assert "missing" in capsys.readouterr().err


def test_writing_over_a_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "crds"
    target.write_text("not a directory", encoding="utf-8")
    assert crds.main(["--out", str(target)]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert target.read_text(encoding="utf-8") == "not a directory"


def test_crds_kustomization_lists_every_crd() -> None:
    kustomization = load(CRDS_DIR / crds.KUSTOMIZATION_FILE)
    assert kustomization["resources"] == sorted(path.name for path in CRDS_DIR.glob("trainguard.dev_*.yaml"))


# --- Kubernetes validity ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["RecoveryPolicy", "WorkloadRecovery"])
def test_crd_is_a_valid_apiextensions_v1_object(kind: str) -> None:
    document = committed_crds()[kind]
    kubernetes_validate.validate(document, KUBE_VERSION, strict=True)
    broken = copy.deepcopy(document)
    broken["spec"]["versions"][0]["subresource"] = {"status": {}}  # typo of subresources
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBE_VERSION, strict=True)


@pytest.mark.parametrize("kind", ["RecoveryPolicy", "WorkloadRecovery"])
def test_schema_is_structural(kind: str) -> None:
    schema = schema_of(kind)
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    for path, node in walk(schema):
        assert "type" in node, f"{kind}{path} has no type"
        for keyword in ("$ref", "anyOf", "oneOf", "allOf", "not", "const", "title", "$defs", "definitions"):
            assert keyword not in node, f"{kind}{path} uses {keyword}"
        assert not ("properties" in node and "additionalProperties" in node), f"{kind}{path}"
        assert node.get("additionalProperties") is not False, f"{kind}{path}"
        if "default" in node:
            assert node["default"] is not None, f"{kind}{path} has a null default"
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            assert node.get(bound, True) is True, f"{kind}{path}: {bound} must be OpenAPI 3.0's boolean"
    for path, node in walk(schema["properties"]["metadata"]):
        assert "default" not in node, path


GO_REPEAT = re.compile(r"(?<!\\)\{(\d+)(?:,(\d*))?\}")


@pytest.mark.parametrize("kind", ["RecoveryPolicy", "WorkloadRecovery"])
def test_patterns_compile_under_gos_regexp(kind: str) -> None:
    """The apiserver compiles each ``pattern`` with Go's regexp, which refuses a repeat count over 1000
    (``{0,1023}`` made the whole CRD invalid: every apply failed); Python's ``re`` accepts it."""
    for path, node in walk(schema_of(kind)):
        pattern = node.get("pattern")
        if pattern is None:
            continue
        re.compile(pattern)
        for low, high in GO_REPEAT.findall(pattern):
            assert int(low) <= 1000 and (not high or int(high) <= 1000), f"{kind}{path}: {pattern!r}"
    assert GO_REPEAT.findall(r"^/[a-z]{0,1023}$") == [("0", "1023")]  # the rule sees what it must refuse


def test_generator_refuses_what_a_structural_schema_cannot_say() -> None:
    from pydantic import BaseModel

    class Either(BaseModel):
        value: int | str

    with pytest.raises(ValueError, match="anyOf"):
        crds.structural(Either)


def test_names_and_the_recoveries_contract() -> None:
    documents = committed_crds()
    taken: set[str] = set()
    for document in documents.values():
        names = document["spec"]["names"]
        assert document["metadata"]["name"] == f"{names['plural']}.{crds.GROUP}"
        assert document["spec"]["group"] == "trainguard.dev"
        assert document["spec"]["scope"] == "Namespaced"
        assert names["categories"] == ["trainguard"]
        own = [names["plural"], names["singular"], *names["shortNames"]]
        for name in own:
            assert DNS_LABEL.fullmatch(name), name
            assert name not in taken, f"{name} collides"
        taken.update(own)
        (version,) = document["spec"]["versions"]
        assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
        assert version["subresources"] == {"status": {}}
    # `kubectl get recoveries` (what docs/operator.md tells users to run) lists WorkloadRecoveries
    assert "recoveries" in documents["WorkloadRecovery"]["spec"]["names"]["shortNames"]
    assert documents["WorkloadRecovery"]["spec"]["names"]["plural"] == "workloadrecoveries"
    assert "rpol" in documents["RecoveryPolicy"]["spec"]["names"]["shortNames"]


def resolve(schema: dict[str, Any], json_path: str) -> dict[str, Any] | None:
    """The schema node a simple printer-column path (``.a.b`` or ``.a[?(@.type=="X")].b``) points at."""
    node = schema
    for part in re.findall(r"\.([A-Za-z]+)(\[\?[^]]*\]|\[[0-9]+\])?", json_path):
        name, selector = part
        properties = node.get("properties")
        if properties is None or name not in properties:
            return None
        node = properties[name]
        if selector:
            node = node["items"]
    return node


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("RecoveryPolicy", ["Mode", "Accepted", "Covered", "Age"]),
        ("WorkloadRecovery", ["Workload", "Phase", "Attempt", "Last Anomaly", "Verdict", "Advice", "Mode", "Last Step",
                              "Age"]),
    ],
)
def test_printer_columns_point_at_real_fields(kind: str, expected: list[str]) -> None:
    schema = schema_of(kind)
    columns = committed_crds()[kind]["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [column["name"] for column in columns if not column.get("priority")] == expected
    for column in columns:
        if column["jsonPath"] == ".metadata.creationTimestamp":
            continue
        node = resolve(schema, column["jsonPath"])
        assert node is not None, f"{column['name']}: {column['jsonPath']} is not in the schema"
        assert node["type"] == column["type"], column


def test_enums_come_from_the_python_vocabularies() -> None:
    status = schema_of("WorkloadRecovery")["properties"]["status"]["properties"]
    assert status["phase"]["enum"] == [phase.value for phase in recovery.Phase]
    assert status["advice"]["properties"]["disposition"]["enum"] == [item.value for item in vocab.Disposition]
    assert status["lastAnomaly"]["properties"]["category"]["enum"] == [item.value for item in vocab.Category]
    policy_spec = schema_of("RecoveryPolicy")["properties"]["spec"]
    assert policy_spec["properties"]["mode"]["enum"] == ["Monitor", "Action"]
    assert policy_spec["properties"]["mode"]["default"] == "Monitor"


def test_policy_spec_is_the_policy_models_schema() -> None:
    generated = copy.deepcopy(schema_of("RecoveryPolicy")["properties"]["spec"])
    generated["properties"]["retries"]["properties"]["backoff"].pop("x-kubernetes-validations")
    source = policy_model.crd_openapi_schema()
    source["default"] = {}
    assert generated == source


def test_conditions_are_a_map_keyed_by_type() -> None:
    for kind in ("RecoveryPolicy", "WorkloadRecovery"):
        conditions = schema_of(kind)["properties"]["status"]["properties"]["conditions"]
        assert conditions["x-kubernetes-list-type"] == "map"
        assert conditions["x-kubernetes-list-map-keys"] == ["type"]
        assert "type" in conditions["items"]["required"]
        assert conditions["maxItems"] >= 1


def test_history_lists_are_bounded() -> None:
    status = schema_of("WorkloadRecovery")["properties"]["status"]["properties"]
    assert status["recentAnomalies"]["maxItems"] == recovery.MAX_RECENT
    assert status["recentActions"]["maxItems"] == recovery.MAX_RECENT
    for path, node in walk(schema_of("WorkloadRecovery")):
        if node["type"] == "array":
            assert "maxItems" in node, f"{path} is unbounded"


def test_override_bounds_are_the_policys() -> None:
    overrides = schema_of("WorkloadRecovery")["properties"]["spec"]["properties"]["overrides"]["properties"]
    policy = schema_of("RecoveryPolicy")["properties"]["spec"]["properties"]
    sources = {
        "mode": policy["mode"],
        "maxRetries": policy["retries"]["properties"]["maxRetries"],
        "maxAttemptsWithoutCheckpoint": policy["retries"]["properties"]["maxAttemptsWithoutCheckpoint"],
        "hangTimeout": policy["detection"]["properties"]["hangTimeout"],
        "maxExcludedNodesPerJob": policy["exclusion"]["properties"]["maxExcludedNodesPerJob"],
    }
    assert set(overrides) == set(sources)
    for name, source in sources.items():
        for keyword in ("type", "minimum", "maximum", "pattern", "enum"):
            assert overrides[name].get(keyword) == source.get(keyword), (name, keyword)
        assert overrides[name]["nullable"] is True
        assert "default" not in overrides[name]


def test_cel_rules_are_generated_from_the_id_patterns() -> None:
    workload = schema_of("WorkloadRecovery")["properties"]["spec"]["properties"]["workload"]
    rules = [rule["rule"] for rule in workload["x-kubernetes-validations"]]
    for kind, (pattern, _message) in recovery.ID_PATTERNS.items():
        assert f"self.kind != '{kind}' || self.id.matches('{pattern}')" in rules
    assert "self == oldSelf" in rules
    backoff = schema_of("RecoveryPolicy")["properties"]["spec"]["properties"]["retries"]["properties"]["backoff"]
    assert "self.maxSeconds >= self.initialSeconds" in backoff["x-kubernetes-validations"][0]["rule"]


# --- examples ---------------------------------------------------------------------------------


def test_there_are_examples_of_both_kinds() -> None:
    kinds = sorted(load(path)["kind"] for path in examples())
    assert kinds.count("RecoveryPolicy") >= 2
    assert kinds.count("WorkloadRecovery") >= 2


@pytest.mark.parametrize("path", examples(), ids=lambda path: path.name)
def test_example_validates_against_the_crd_schema(path: Path) -> None:
    document = load(path)
    assert document["apiVersion"] == f"{crds.GROUP}/{crds.VERSION}"
    errors = [error.message for error in validator(document["kind"]).iter_errors(document)]
    assert errors == []


@pytest.mark.parametrize("path", examples(), ids=lambda path: path.name)
def test_example_loads_into_the_pydantic_models(path: Path) -> None:
    document = load(path)
    if document["kind"] == "RecoveryPolicy":
        policy = loader.parse_document(document, str(path))
        assert policy.metadata.name == document["metadata"]["name"]
    else:
        parsed = recovery.parse(document)
        assert parsed.spec.workload.id == document["spec"]["workload"]["id"]
        dumped = parsed.model_dump(by_alias=True, mode="json", exclude_unset=True)
        assert dumped.get("status") == document.get("status")  # a person's object has none yet


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("spec", "workload", "kind"), "TrainJob"),  # a kind no adapter serves
        (("status", "phase"), "Exploded"),
        (("status", "advice", "disposition"), "Maybe"),
        (("status", "attempt"), -1),
        (("status", "recentActions"), "eleven"),
        (("spec", "overrides", "maxRetries"), 101),
        (("spec", "overrides", "hangTimeout"), "90"),
    ],
)
def test_a_broken_workload_recovery_is_rejected_by_both(where: tuple[str, ...], value: Any) -> None:
    document = load(EXAMPLES / "workloadrecovery-slurm.yaml")
    node = document
    for key in where[:-1]:
        node = node[key]
    if value == "eleven":  # one more than the bound, each entry valid on its own
        value = node[where[-1]] * (recovery.MAX_RECENT + 1)
    node[where[-1]] = value
    assert list(validator("WorkloadRecovery").iter_errors(document)), "the CRD schema accepted it"
    with pytest.raises(ValidationError):
        recovery.parse(document)


def test_a_broken_policy_is_rejected_by_both() -> None:
    document = load(EXAMPLES / "recoverypolicy-action.yaml")
    document["spec"]["blastRadius"]["maxDrainedShare"] = 1.5
    assert list(validator("RecoveryPolicy").iter_errors(document))
    with pytest.raises(loader.PolicyError):
        loader.parse_document(document, "broken")
