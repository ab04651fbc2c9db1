"""The Helm chart (charts/trainguard) renders what the code needs, and nothing else, for every
values file in its ci/ folder: `helm lint`, the RBAC of each mode against the permission table
(trainguard.k8s.rbac), every environment variable read by the settings (`--print-config`), every
`TRAINGUARD_*` variable the templates can set a setting and rendered by some values file, every
value documented and typed, and the helm-unittest suites.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support import helm as helm_support
from trainguard.cli import config
from trainguard.k8s import rbac

pytestmark = [pytest.mark.integration, pytest.mark.helm, pytest.mark.timeout(helm_support.BUILD_TIMEOUT_S)]

CHART = helm_support.CHART
CI_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
KUBE_VERSION = "1.36.0"
RELEASE = "tg"
NAMESPACE = "trainguard-system"
ROLE_SCOPES = {"": "cluster", "-served": "served", "-slinky": "slinky", "-workload": "workload"}
"""Name suffix of each generated role -> the permission table's scope (templates/rbac.yaml)."""
ENV_NOT_SETTINGS = {"HOME": "slurm-ssh: asyncssh reads the key and known_hosts from ~/.ssh"}
"""Variables the chart sets that no setting reads, with what reads them."""


def values_of(path: Path) -> dict[str, Any]:
    """The chart's defaults overlaid with one values file (the overlay Helm does, for plain maps)."""
    def merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
        out = dict(base)
        for key, value in top.items():
            out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        return out
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    return merge(defaults, yaml.safe_load(path.read_text()) or {})


def features_of(values: dict[str, Any]) -> list[str]:
    """The permission table's features a values file enables (a second reading of templates/_helpers.tpl)."""
    features = ["core"]
    if values["watch"]["allNamespaces"]:
        features.append("allNamespaces")
    if values["slinky"]["enabled"]:
        features.append("slinky")
    if int(values["replicaCount"]) > 1:
        features.append("peering")
    if values["kubernetes"]["enabled"]:
        features.append("kubernetes")
    return features


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def granted(objects: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    """(scope, group, resource, verb) of every rule of the chart's roles."""
    fullname = f"{RELEASE}-trainguard"
    out: set[tuple[str, str, str, str]] = set()
    for role in by_kind(objects, "ClusterRole") + by_kind(objects, "Role"):
        scope = ROLE_SCOPES[role["metadata"]["name"].removeprefix(fullname)]
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    out.update((scope, group, resource, verb) for verb in rule["verbs"])
    return out


@pytest.fixture(scope="module")
def rendered(helm: helm_support.Helm) -> dict[str, list[dict[str, Any]]]:
    return {path.name: helm.template("-f", str(path), release=RELEASE, namespace=NAMESPACE) for path in CI_FILES}


def test_ci_matrix_covers_every_mode() -> None:
    features = {feature for path in CI_FILES for feature in features_of(values_of(path))}
    assert features == set(rbac.FEATURES)
    schedulers = {values_of(path)["slurm"]["scheduler"].split(":")[0] for path in CI_FILES}
    assert schedulers == {"slurm-local", "slurm-ssh", "slurm-rest"}
    assert any(values_of(path)["mysql"]["enabled"] for path in CI_FILES)
    assert any(values_of(path)["database"]["url"]["existingSecret"] for path in CI_FILES)


def test_helm_lint(helm: helm_support.Helm) -> None:
    done = helm.run("lint", "--strict", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr
    for path in CI_FILES:
        done = helm.run("lint", "--strict", str(CHART), "-f", str(path))
        assert done.returncode == 0, (path.name, done.stdout + done.stderr)


def test_schema_rejects_unknown_and_wrong_values(helm: helm_support.Helm) -> None:
    for bad in ("mode=acton", "replicaCount=0", "slurm.scheduler=slurm://x", "databse.url.existingSecret=x"):
        done = helm.run("template", RELEASE, str(CHART), "--set", bad)
        assert done.returncode != 0, bad
        assert "values don't meet the specifications of the schema" in done.stderr, (bad, done.stderr)


@pytest.mark.parametrize("path", CI_FILES, ids=lambda p: p.name)
def test_every_object_is_valid_kubernetes(path: Path, rendered: dict[str, list[dict[str, Any]]]) -> None:
    for obj in rendered[path.name]:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


@pytest.mark.parametrize("path", CI_FILES, ids=lambda p: p.name)
def test_roles_are_exactly_the_permission_table(path: Path, rendered: dict[str, list[dict[str, Any]]]) -> None:
    values = values_of(path)
    objects = rendered[path.name]
    assert granted(objects) == rbac.granted(features_of(values))
    for role in by_kind(objects, "ClusterRole") + by_kind(objects, "Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert not any("*" in item for item in rule[field]), (role["metadata"]["name"], rule)


@pytest.mark.parametrize("path", CI_FILES, ids=lambda p: p.name)
def test_roles_are_bound_where_their_scope_says(path: Path, rendered: dict[str, list[dict[str, Any]]]) -> None:
    values = values_of(path)
    objects = rendered[path.name]
    fullname = f"{RELEASE}-trainguard"
    workload_ns = values["workloadNamespace"] or NAMESPACE
    bindings = {(obj["kind"], obj["metadata"].get("namespace", ""), obj["roleRef"]["name"])
                for obj in by_kind(objects, "ClusterRoleBinding") + by_kind(objects, "RoleBinding")}
    expected = {("ClusterRoleBinding", "", fullname)}
    if values["watch"]["allNamespaces"]:
        expected.add(("ClusterRoleBinding", "", f"{fullname}-served"))
    else:
        served = {workload_ns, *values["watch"]["namespaces"]}
        expected |= {("RoleBinding", ns, f"{fullname}-served") for ns in served}
    if values["slinky"]["enabled"]:
        expected.add(("RoleBinding", values["slinky"]["namespace"], f"{fullname}-slinky"))
    # the operator's own namespace: always the trainguard-control ConfigMap (the runtime pause), and the
    # Lease when replicaCount > 1
    expected.add(("RoleBinding", workload_ns, f"{fullname}-workload"))
    assert [(r["metadata"]["namespace"]) for r in by_kind(objects, "Role")] == [workload_ns]
    assert bindings == expected
    for binding in by_kind(objects, "ClusterRoleBinding") + by_kind(objects, "RoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": fullname, "namespace": NAMESPACE}]


def _operator_env(objects: list[dict[str, Any]], container: str, tmp_path: Path) -> dict[str, str]:
    """The environment the container would get: fieldRefs filled in, mounted files made real."""
    deployment = by_kind(objects, "Deployment")
    assert len(deployment) == 1
    pod = deployment[0]["spec"]["template"]["spec"]
    spec = next(c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == container)
    env: dict[str, str] = {}
    for item in spec.get("env", []):
        if "valueFrom" in item:
            env[item["name"]] = {"metadata.namespace": NAMESPACE, "metadata.name": "tg-pod-0"}[
                item["valueFrom"]["fieldRef"]["fieldPath"]]
            continue
        value = str(item["value"])
        if value.startswith("/etc/") or value.startswith("/var/lib/trainguard"):
            real = tmp_path / value.lstrip("/")
            if value.endswith("/url"):
                real.parent.mkdir(parents=True, exist_ok=True)
                real.write_text(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}\n")
            elif value.startswith("/etc/"):
                real.parent.mkdir(parents=True, exist_ok=True)
                real.write_text("secret\n")
            else:
                real.mkdir(parents=True, exist_ok=True)
            value = str(real)
        env[item["name"]] = value
    return env


def _run_trainguard(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    dropped = ("SLURM_JWT", "POD_NAMESPACE", *config.READ_ELSEWHERE)
    clean = {name: value for name, value in os.environ.items()
             if not name.startswith("TRAINGUARD_") and name not in dropped}
    return subprocess.run([sys.executable, "-m", "trainguard.cli.main", *args], env={**clean, **env},
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("path", CI_FILES, ids=lambda p: p.name)
def test_every_env_var_is_read_by_the_settings(path: Path, rendered: dict[str, list[dict[str, Any]]],
                                              tmp_path: Path) -> None:
    env = _operator_env(rendered[path.name], "operator", tmp_path)
    known = {name for field in config.OperatorSettings.model_fields
             for name in config.env_names(config.OperatorSettings, field)}
    for name in env:
        assert name in known or name in config.READ_ELSEWHERE or name in ENV_NOT_SETTINGS, name
    done = _run_trainguard({k: v for k, v in env.items() if k not in ENV_NOT_SETTINGS}, "operator", "--print-config")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["environment"]["unused"] == []
    read = shown["environment"]["read"]
    assert {name for name in env if name not in ENV_NOT_SETTINGS} == set(read), read
    values = values_of(path)
    assert shown["settings"]["mode"]["value"] == values["mode"]
    assert shown["settings"]["mode"]["source"] == "env TRAINGUARD_MODE"
    if values["database"]["url"]["existingSecret"] or values["mysql"]["enabled"]:
        assert shown["settings"]["db_url_file"]["source"] == "env TRAINGUARD_DB_URL_FILE"
    assert ("peering" in features_of(values)) == (shown["settings"]["peering"]["value"] is not None)


TEMPLATE_VARIABLE = re.compile(r"^\s*- name: (TRAINGUARD_[A-Z0-9_]+)\s*$", re.MULTILINE)


def template_variables() -> set[str]:
    """Every ``TRAINGUARD_*`` variable the templates (and their helpers) can set, under any values."""
    return {name for path in sorted((CHART / "templates").iterdir()) if path.suffix in (".yaml", ".tpl")
            for name in TEMPLATE_VARIABLE.findall(path.read_text(encoding="utf-8"))}


def test_every_variable_the_chart_can_set_is_a_setting(rendered: dict[str, list[dict[str, Any]]],
                                                      tmp_path: Path) -> None:
    """The chart cannot drift from the one settings definition (cli/config.py): a variable a template
    sets is an environment variable of the operator's settings, and every such variable is rendered by
    some values file of ci/, so the --print-config test above reads each one for real."""
    can_set = template_variables()
    assert len(can_set) > 15, can_set
    known = {env for name in config.OperatorSettings.model_fields
             for env in config.env_names(config.OperatorSettings, name)}
    assert sorted(can_set - known) == [], "the chart sets variables no setting reads"
    seen: set[str] = set()
    for objects in rendered.values():
        for container in ("operator", "migrate"):
            seen.update(name for name in _operator_env(objects, container, tmp_path) if name.startswith("TRAINGUARD_"))
    assert sorted(can_set - seen) == [], "a variable no values file of ci/ renders: add one that does"
    assert sorted(seen - can_set) == [], "rendered, but not found in the templates by TEMPLATE_VARIABLE"


@pytest.mark.parametrize("path", CI_FILES, ids=lambda p: p.name)
def test_migration_init_container_reads_the_same_database(path: Path, rendered: dict[str, list[dict[str, Any]]],
                                                        tmp_path: Path) -> None:
    env = _operator_env(rendered[path.name], "migrate", tmp_path)
    operator_env = _operator_env(rendered[path.name], "operator", tmp_path)
    assert {k: v for k, v in env.items() if "DB_URL" in k or k == "TRAINGUARD_HOME"} == \
        {k: v for k, v in operator_env.items() if "DB_URL" in k or k == "TRAINGUARD_HOME"}
    done = _run_trainguard(env, "db", "upgrade")
    assert done.returncode == 0, done.stderr
    assert "at revision" in done.stdout
    again = _run_trainguard(env, "db", "upgrade")  # a database at head: a no-op
    assert again.returncode == 0 and again.stdout == done.stdout, again.stderr


def _leaves(values: Any, prefix: str, schema: dict[str, Any]) -> list[tuple[str, bool]]:
    """(dotted path, typed in the schema) of every documented unit of values.yaml: a leaf, a list, or
    a free-form map (a schema entry without properties, e.g. resources)."""
    out: list[tuple[str, bool]] = []
    props = schema.get("properties")
    if isinstance(values, dict) and values and props is not None:
        for key, value in values.items():
            sub = props.get(key)
            path = f"{prefix}.{key}" if prefix else key
            if sub is None:
                out.append((path, False))
            else:
                out.extend(_leaves(value, path, sub))
        return out
    return [(prefix, True)]


def test_every_value_is_documented_and_typed() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    readme = (CHART / "README.md").read_text()
    leaves = _leaves(values, "", schema)
    assert len(leaves) > 60
    untyped = [path for path, typed in leaves if not typed]
    assert untyped == []
    undocumented = [path for path, _ in leaves if f"`{path}`" not in readme]
    assert undocumented == []
    mysql = yaml.safe_load((CHART / "charts" / "mysql" / "values.yaml").read_text())
    sub = [path for path in _flat(mysql, "mysql") if path != "mysql.enabled"]
    assert [path for path in sub if f"`{path}`" not in readme] == []


def _flat(values: dict[str, Any], prefix: str) -> list[str]:
    out: list[str] = []
    for key, value in values.items():
        path = f"{prefix}.{key}"
        out.extend(_flat(value, path) if isinstance(value, dict) and value and key != "resources" else [path])
    return out


def test_no_secret_is_inline_by_default(helm: helm_support.Helm) -> None:
    objects = helm.template(release=RELEASE, namespace=NAMESPACE)
    assert by_kind(objects, "Secret") == []
    deployment = by_kind(objects, "Deployment")[0]
    for container in deployment["spec"]["template"]["spec"]["containers"]:
        for item in container.get("env", []):
            assert not any(word in item["name"] for word in ("PASSWORD", "TOKEN", "JWT")) or \
                item["name"].endswith("_FILE"), item


def test_helm_unittest_suites(helm: helm_support.Helm) -> None:
    done = helm.run("unittest", "--strict", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Charts:      1 passed" in done.stdout, done.stdout
