"""The shipped manifests configure what the operator really reads.

The Deployment of each kustomization is rendered (the same reader as test_manifests.py; kubectl
kustomize must agree, checked there), and the installed ``trainguard`` is started with exactly its
command, arguments and environment, plus ``--print-config``: the effective configuration it prints
must be what the manifests mean, and every variable they set must be one the operator reads.
A subprocess (the real console script), so not marked unit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.k8s.test_manifests import KUSTOMIZATIONS, by_kind, render

TRAINGUARD = Path(sys.executable).with_name("trainguard")


def container_env(deployment: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet would set it (downward API resolved)."""
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
            continue
        field = item["valueFrom"]["fieldRef"]["fieldPath"]
        assert field == "metadata.namespace", f"resolve {field} here"
        env[item["name"]] = deployment["metadata"]["namespace"]
    return env


@pytest.mark.parametrize("root", KUSTOMIZATIONS, ids=lambda path: path.name)
def test_operator_reads_every_variable_the_manifests_set(root: Path, tmp_path: Path) -> None:
    (deployment,) = by_kind(render(root), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = container_env(deployment, container)
    assert container["command"] == ["trainguard"]
    done = subprocess.run([str(TRAINGUARD), *container["args"], "--print-config"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    read = printed["environment"]["read"]
    assert sorted(set(env) - set(read)) == [], f"the manifests set variables nothing reads; read: {read}"
    assert printed["environment"]["unused"] == []
    settings = printed["settings"]

    # What the manifests mean, as the operator understood it.
    assert printed["command"] == "operator"
    assert settings["mode"] == {"value": "monitor", "source": "env TRAINGUARD_MODE"}
    assert printed["effective"]["action_switch"] is False
    assert printed["effective"]["namespaces"] == "all"
    assert printed["effective"]["workload_namespace"] == deployment["metadata"]["namespace"]
    home = env["TRAINGUARD_HOME"]
    assert printed["effective"]["db"] == f"sqlite+aiosqlite:///{home}/trainguard.db"
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert home in mounts, "the audit database must be on the persistent volume"
    host, port = settings["http_listen"]["value"].rsplit(":", 1)
    assert settings["http_listen"]["source"] == "env TRAINGUARD_HTTP_LISTEN"
    assert host == "0.0.0.0", "probes come from the kubelet, not from loopback"
    ports = {item["name"]: item["containerPort"] for item in container["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert ports[container[probe]["httpGet"]["port"]] == int(port), probe
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
