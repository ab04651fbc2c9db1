"""The real `trainguard operator` runs with what the chart grants: installed by Helm on the real
apiserver (default values: every namespace served, one replica), the operator process is started
with a token of the chart's ServiceAccount and the environment of the chart's Deployment. It must
watch policies cluster-wide (kopf's CRD scanning), accept a new policy (status patch) and post its
Event, with no request forbidden.

No pod runs on the plain apiserver, so the process runs here, outside the cluster, as the pod would.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.kube import operator_process as op
from tests.support import helm as helm_support
from tests.support import kube

RBAC_DENIAL = re.compile(r'forbidden: User "[^"]+" cannot ')
"""How the API server words a request our ServiceAccount has no right to make."""

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.helm,
              pytest.mark.timeout(kube.BUILD_TIMEOUT_S)]


def _deployment_env(helm: helm_support.Helm, release: str, namespace: str, home: Path) -> dict[str, str]:
    objects = helm.template(release=release, namespace=namespace)
    (deployment,) = [obj for obj in objects if obj["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = {}
    for item in container["env"]:
        if "valueFrom" in item:
            env[item["name"]] = {"metadata.namespace": namespace, "metadata.name": f"{release}-pod"}[
                item["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[item["name"]] = str(item["value"])
    env["TRAINGUARD_HOME"] = str(home)  # the pod's state volume
    env["TRAINGUARD_HTTP_LISTEN"] = "127.0.0.1:0"  # several sessions share this machine
    return env


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == type_:
            found: dict[str, Any] = item
            return found
    return {}


def test_operator_runs_with_the_chart_rbac(helm: helm_support.Helm, kube_api: kube.LocalKube,
                                          tmp_path: Path) -> None:
    namespace = kube.unique_name("tg-chart-op")
    release = kube.unique_name("op")
    op.ok(kube_api.kubectl("create", "namespace", namespace))
    done = helm.run("install", release, str(helm_support.CHART), "-n", namespace, kubeconfig=kube_api.kubeconfig)
    assert done.returncode == 0, done.stderr
    policies_ns = kube.unique_name("tg-team")
    op.ok(kube_api.kubectl("create", "namespace", policies_ns))
    policy = f"chart-{secrets.token_hex(4)}"
    op.ok(kube_api.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "trainguard.dev/v1alpha1", "kind": "RecoveryPolicy",
        "metadata": {"name": policy, "namespace": policies_ns}, "spec": {"mode": "Monitor"}})))

    kubeconfig = kube_api.service_account_kubeconfig(f"{release}-trainguard", namespace, tmp_path / "kubeconfig")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINGUARD_", "SLURM_", "KUBECONFIG"))}
    env.update(_deployment_env(helm, release, namespace, home))
    env["KUBECONFIG"] = str(kubeconfig)
    process = op.OperatorProcess([], env, tmp_path / "operator.log")
    process.start()
    try:
        def accepted() -> bool:
            done = kube_api.kubectl("get", "recoverypolicy", policy, "-n", policies_ns, "-o", "json")
            return done.returncode == 0 and _condition(json.loads(done.stdout), "Accepted").get("status") == "True"

        op.poll("Accepted=True on the policy", accepted, 120, process.tail)

        def event_posted() -> bool:
            done = kube_api.kubectl("get", "events", "-n", policies_ns, "-o", "json",
                                    "--field-selector", f"involvedObject.name={policy}")
            return done.returncode == 0 and bool(json.loads(done.stdout)["items"])

        op.poll("an Event on the policy", event_posted, 60, process.tail)
        assert process.alive(), process.tail()
    finally:
        process.stop()
    log = (tmp_path / "operator.log").read_text(errors="replace")
    # An RBAC denial names the user and what it cannot do. Other 403s are not about our rights: other
    # tests' namespaces being deleted refuse new Events ("is being terminated") to anyone.
    denied = [line for line in log.splitlines() if RBAC_DENIAL.search(line)]
    assert not denied, process.tail(200)
    # the same identity is refused what the chart does not grant (a sanity check of the token)
    denied = subprocess.run([str(kube_api.kubectl_path), "auth", "can-i", "patch", "nodes"],
                            env={**os.environ, "KUBECONFIG": str(kubeconfig)}, capture_output=True, text=True,
                            timeout=60, check=False)
    assert denied.stdout.strip() == "no", denied.stdout + denied.stderr
    helm.run("uninstall", release, "-n", namespace, kubeconfig=kube_api.kubeconfig)
