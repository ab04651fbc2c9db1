"""The chart on a real kube-apiserver: every ci/ values file passes a server-side dry run, and a
release is installed, upgraded in place, rolled back and uninstalled (CRDs and the audit volume
kept), with SQLite, with the MySQL subchart and with an external database.

On the plain apiserver (hack/local-kube.sh up) no pod runs: the tests check the objects the API
accepted and keeps, which is what Helm's lifecycle changes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import helm as helm_support
from tests.support import kube

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.helm,
              pytest.mark.timeout(kube.BUILD_TIMEOUT_S)]

CHART = helm_support.CHART
CI_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
CRDS = ("recoverypolicies.trainguard.dev", "workloadrecoveries.trainguard.dev")


def _namespace(kube_api: kube.LocalKube, name: str) -> None:
    manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    done = kube_api.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    assert done.returncode == 0, done.stderr


def _get(kube_api: kube.LocalKube, *args: str) -> dict[str, Any] | None:
    done = kube_api.kubectl("get", *args, "-o", "json")
    if done.returncode != 0:
        assert "NotFound" in done.stderr, done.stderr
        return None
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def _env(deployment: dict[str, Any]) -> dict[str, str]:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {item["name"]: item.get("value", "") for item in container["env"]}


@pytest.mark.parametrize("path", CI_FILES, ids=lambda p: p.name)
def test_server_side_dry_run(path: Path, helm: helm_support.Helm, kube_api: kube.LocalKube) -> None:
    namespace = kube.unique_name("tg-dry")
    release = kube.unique_name("dry")
    values = yaml.safe_load(path.read_text()) or {}
    for name in {namespace, *values.get("watch", {}).get("namespaces", []),
                 values.get("slinky", {}).get("namespace", "slurm")}:
        _namespace(kube_api, name)
    crds = kube_api.kubectl("apply", "--server-side", "-f", str(CHART / "crds"))
    assert crds.returncode == 0, crds.stderr
    done = helm.run("template", release, str(CHART), "-n", namespace, "-f", str(path))
    assert done.returncode == 0, done.stderr
    # every namespaced object names its namespace (the served and Slinky ones are not the release's)
    dry = kube_api.kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=helm-test", "-f", "-",
                           input=done.stdout)
    assert dry.returncode == 0, dry.stderr
    kinds = {line.split("/", 1)[0] for line in dry.stdout.splitlines()}
    assert {"deployment.apps", "serviceaccount", "clusterrole.rbac.authorization.k8s.io"} <= kinds, dry.stdout


@pytest.mark.parametrize("database", ["sqlite", "mysql", "external"])
def test_install_upgrade_rollback_uninstall(database: str, helm: helm_support.Helm, kube_api: kube.LocalKube,
                                            tmp_path: Path) -> None:
    namespace = kube.unique_name("tg-life")
    release = kube.unique_name("life")
    fullname = f"{release}-trainguard"
    _namespace(kube_api, namespace)
    values: dict[str, Any] = {}
    if database == "mysql":
        values = {"mysql": {"enabled": True}}
    elif database == "external":
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": namespace},
                  "stringData": {"url": "postgresql+asyncpg://tg:pw@postgres.db.svc/trainguard"}}
        assert kube_api.kubectl("apply", "-f", "-", input=json.dumps(secret)).returncode == 0
        values = {"database": {"url": {"existingSecret": "db"}}}
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    kubeconfig = kube_api.kubeconfig

    # install: every object is there, CRDs included
    done = helm.run("install", release, str(CHART), "-n", namespace, "-f", str(values_file), kubeconfig=kubeconfig)
    assert done.returncode == 0, done.stderr
    deployment = _get(kube_api, "deployment", fullname, "-n", namespace)
    assert deployment is not None
    assert _env(deployment)["TRAINGUARD_MODE"] == "monitor"
    assert _get(kube_api, "serviceaccount", fullname, "-n", namespace) is not None
    assert _get(kube_api, "service", fullname, "-n", namespace) is not None
    assert _get(kube_api, "clusterrole", fullname) is not None
    assert _get(kube_api, "clusterrolebinding", f"{fullname}-served") is not None
    for crd in CRDS:
        assert _get(kube_api, "crd", crd) is not None
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    if database == "sqlite":
        assert _get(kube_api, "pvc", f"{fullname}-state", "-n", namespace) is not None
        assert "db-url" not in volumes
    else:
        assert volumes["db-url"]["secret"]["secretName"] == ("db" if database == "external" else f"{release}-mysql")
        assert _get(kube_api, "pvc", f"{fullname}-state", "-n", namespace) is None
    if database == "mysql":
        assert _get(kube_api, "statefulset", f"{release}-mysql", "-n", namespace) is not None
        assert _get(kube_api, "service", f"{release}-mysql", "-n", namespace) is not None
        secret_obj = _get(kube_api, "secret", f"{release}-mysql", "-n", namespace)
        assert secret_obj is not None and set(secret_obj["data"]) == {"mysql-root-password", "mysql-password", "url"}

    # upgrade in place: same object, new generation, the new value
    uid, generation = deployment["metadata"]["uid"], deployment["metadata"]["generation"]
    done = helm.run("upgrade", release, str(CHART), "-n", namespace, "-f", str(values_file), "--set", "mode=action",
                    kubeconfig=kubeconfig)
    assert done.returncode == 0, done.stderr
    upgraded = _get(kube_api, "deployment", fullname, "-n", namespace)
    assert upgraded is not None
    assert upgraded["metadata"]["uid"] == uid
    assert upgraded["metadata"]["generation"] > generation
    assert _env(upgraded)["TRAINGUARD_MODE"] == "action"
    if database == "mysql":  # generated passwords survive the upgrade
        again = _get(kube_api, "secret", f"{release}-mysql", "-n", namespace)
        assert again is not None and again["data"] == secret_obj["data"]

    # rollback to the first revision
    done = helm.run("rollback", release, "1", "-n", namespace, kubeconfig=kubeconfig)
    assert done.returncode == 0, done.stderr
    rolled = _get(kube_api, "deployment", fullname, "-n", namespace)
    assert rolled is not None and rolled["metadata"]["uid"] == uid
    assert _env(rolled)["TRAINGUARD_MODE"] == "monitor"
    history = helm.run("history", release, "-n", namespace, "-o", "json", kubeconfig=kubeconfig)
    assert [entry["revision"] for entry in json.loads(history.stdout)] == [1, 2, 3]

    # uninstall: the release's objects go, the CRDs and the audit volume stay
    done = helm.run("uninstall", release, "-n", namespace, "--wait", kubeconfig=kubeconfig)
    assert done.returncode == 0, done.stderr
    assert _get(kube_api, "deployment", fullname, "-n", namespace) is None
    assert _get(kube_api, "clusterrole", fullname) is None
    assert _get(kube_api, "clusterrolebinding", f"{fullname}-served") is None
    assert _get(kube_api, "serviceaccount", fullname, "-n", namespace) is None
    for crd in CRDS:
        assert _get(kube_api, "crd", crd) is not None
    if database == "sqlite":
        assert _get(kube_api, "pvc", f"{fullname}-state", "-n", namespace) is not None
