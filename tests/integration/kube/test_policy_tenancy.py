"""Tenancy of RecoveryPolicies on the real kube-apiserver: ``trainguard operator --scheduler kubernetes``
(kopf, the shipped RBAC's identity) serving three namespaces, its own (the admin's) and two teams'.

Team B's Action-mode policy has a more specific selector than the admin's Monitor-mode policy and even
lists team A's namespace in ``selector.namespaces``: it must cover team B's workload and nothing of
team A's, whether team A's JobSet names no policy or names team B's. The WorkloadRecovery status each
workload gets (policy in force, effective mode, or why none) and the policies' coveredWorkloads are
what is checked, as a user sees them. The cluster-wide Action switch is on, so team B's policy really
is in Action mode where it applies. Then team A's JobSet fails: its advice is the admin policy's, in
Monitor mode, recorded and not carried out (on the old routing, team B's policy tried to restart it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kube import LocalKube, unique_name
from tests.support.kubejobs import install_workload_crds
from trainguard import settings as settings_mod
from trainguard.k8s import operator

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[3]
WAIT_S = 120.0


def ok(kube: LocalKube, *args: str, input: str | None = None) -> str:
    done = kube.kubectl(*args, input=input)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def shipped_rules() -> list[dict[str, Any]]:
    """The operator's rules as shipped (manifests/base + manifests/kubernetes), without Slinky's."""
    rules: list[dict[str, Any]] = []
    for path in (REPO / "manifests/base/rbac.yaml", REPO / "manifests/kubernetes/rbac.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "ClusterRole" and doc["metadata"]["name"] != "trainguard-slinky-pods":
                rules.extend(doc["rules"])
    return rules


@dataclass(frozen=True)
class Tenants:
    kube: LocalKube
    ops: str
    """The operator's own namespace: the admin's policies."""
    team_a: str
    team_b: str
    kubeconfig: Path


@pytest.fixture
def tenants(kube_api: LocalKube, tmp_path: Path) -> Iterator[Tenants]:
    install_workload_crds(kube_api)
    ok(kube_api, "apply", "-k", str(REPO / "crds"))
    for crd in ("recoverypolicies.trainguard.dev", "workloadrecoveries.trainguard.dev"):
        ok(kube_api, "wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    ops, team_a, team_b = unique_name("tg-ops"), unique_name("tg-team-a"), unique_name("tg-team-b")
    role, sa = unique_name("tg-tenancy"), "trainguard"
    for namespace in (ops, team_a, team_b):
        ok(kube_api, "create", "namespace", namespace)
    ok(kube_api, "create", "serviceaccount", sa, "-n", ops)
    ok(kube_api, "apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
         "rules": shipped_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
         "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ops}]},
    ]))
    kubeconfig = kube_api.service_account_kubeconfig(sa, ops, tmp_path / "operator.kubeconfig")
    try:
        yield Tenants(kube_api, ops, team_a, team_b, kubeconfig)
    finally:
        kube_api.kubectl("delete", "clusterrolebinding,clusterrole", role, "--wait=false")
        for namespace in (ops, team_a, team_b):
            kube_api.kubectl("delete", "namespace", namespace, "--wait=false")


def policy(namespace: str, name: str, mode: str, selector: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "trainguard.dev/v1alpha1", "kind": "RecoveryPolicy",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"mode": mode, "selector": selector, "actions": {"allowed": ["requeue", "cordonNode"]}}}


def jobset(namespace: str, name: str, policy_name: str) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace, "labels": {"team": "vision"},
                         "annotations": {"trainguard.dev/policy": policy_name}},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
                "parallelism": 1, "completions": 1, "template": {"spec": {
                    "restartPolicy": "Never", "containers": [{"name": "train", "image": "x"}]}}}}}]}}


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not await check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.3)


def fail(t: Tenants, namespace: str, name: str) -> None:
    """The JobSet's one pod exits 1 and the JobSet is Failed, as kubelet and its controller would write."""
    ok(t.kube, "apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-workers-0-0", "namespace": namespace, "labels": {
            "jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-completion-index": "0",
            "jobset.sigs.k8s.io/restart-attempt": "0"}},
        "spec": {"nodeName": f"{namespace}-node", "automountServiceAccountToken": False,
                 "containers": [{"name": "train", "image": "x"}]}}))
    terminated = {"exitCode": 1, "reason": "Error", "startedAt": "2026-12-01T10:00:00Z",
                  "finishedAt": "2026-12-01T10:01:00Z"}
    for kind, target, status in (
        ("pod", f"{name}-workers-0-0", {
            "phase": "Failed", "startTime": "2026-12-01T10:00:00Z",
            "containerStatuses": [{"name": "train", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
                                   "state": {"terminated": terminated}}]}),
        ("jobset", name, {"terminalState": "Failed"}),
    ):
        ok(t.kube, "patch", kind, target, "-n", namespace, "--subresource=status", "--type=merge",
           "-p", json.dumps({"status": status}))


def resolved(body: dict[str, Any]) -> dict[str, Any] | None:
    conditions = (body.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "PolicyResolved"), None)


async def test_a_tenant_policy_covers_its_own_namespace_only_and_the_admin_policy_every_namespace(
        tenants: Tenants, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = tenants
    vision = {"labels": {"team": "vision"}}
    ok(t.kube, "apply", "-f", "-", input=yaml.safe_dump_all([
        policy(t.ops, "vision", "Monitor", vision),  # the admin's: specificity 1, every namespace
        # team B's: specificity 2, Action, and its selector even names team A's namespace
        policy(t.team_b, "grab", "Action", {**vision, "namespaces": [t.team_a, t.team_b]}),
        jobset(t.team_a, "train", ""),  # names no policy: routed by selectors
        jobset(t.team_a, "named", "grab"),  # names team B's policy
        jobset(t.team_b, "own", ""),
    ]))
    monkeypatch.setenv("KUBECONFIG", str(t.kubeconfig))
    config = operator.OperatorConfig(
        scheduler="kubernetes", namespaces=(t.ops, t.team_a, t.team_b), workload_namespace=t.ops,
        db_url=f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}", status_interval_s=0.5,
        engine=settings_mod.EngineSettings(allow_action=True, discovery_interval_s=0.5))
    stop = asyncio.Event()
    running = asyncio.create_task(operator.run(config, stop_flag=stop))
    seen: dict[str, dict[str, Any]] = {}

    def recovery_of(namespace: str, name: str) -> Callable[[], Awaitable[bool]]:
        async def has_status() -> bool:
            assert not running.done(), running.exception() if not running.cancelled() else "cancelled"
            done = await asyncio.to_thread(t.kube.kubectl, "get", "workloadrecovery", f"jobset-{name}", "-n",
                                           namespace, "-o", "json")
            if done.returncode != 0:
                return False
            seen[f"{namespace}/{name}"] = body = json.loads(done.stdout)
            return resolved(body) is not None
        return has_status

    try:
        for namespace, name in ((t.team_a, "train"), (t.team_a, "named"), (t.team_b, "own")):
            await until(recovery_of(namespace, name), f"the WorkloadRecovery status of {namespace}/{name}")

        own = seen[f"{t.team_b}/own"]  # team B's policy is in force, in Action mode, for team B's workload
        assert own["status"]["policy"] == "grab", own["status"]
        assert resolved(own)["message"] == "policy 'grab' in Action mode"  # type: ignore[index]

        train = seen[f"{t.team_a}/train"]  # team A's workload: the admin's Monitor policy, not team B's Action
        assert train["status"]["policy"] == "vision", train["status"]
        assert resolved(train)["message"] == "policy 'vision' in Monitor mode"  # type: ignore[index]

        named = seen[f"{t.team_a}/named"]  # naming team B's policy does not make it cover team A's workload
        condition = resolved(named)
        assert condition is not None and condition["status"] == "False", named["status"]
        assert f"RecoveryPolicy {t.team_b}/grab is a tenant policy" in condition["message"], condition

        async def counted() -> bool:
            body = json.loads(await asyncio.to_thread(ok, t.kube, "get", "recoverypolicy", "grab", "-n", t.team_b,
                                                      "-o", "json"))
            return (body.get("status") or {}).get("coveredWorkloads") == 1

        await until(counted, f"{t.team_b}/grab covering exactly one workload (team B's)")

        # Team A's JobSet fails (its pod exits 1, the JobSet controller's terminal state written as it
        # would write it): the advice is decided under the admin's Monitor policy and only recorded.
        fail(t, t.team_a, "train")

        async def advised() -> bool:
            await recovery_of(t.team_a, "train")()
            advice = (seen[f"{t.team_a}/train"].get("status") or {}).get("advice") or {}
            return advice.get("disposition") not in (None, "", "Pending")  # Pending: the executor not done yet

        await until(advised, "the advice on team A's failed JobSet, closed")
        advice = seen[f"{t.team_a}/train"]["status"]["advice"]
        assert (advice["mode"], advice["disposition"]) == ("Monitor", "Monitored"), advice
        body = json.loads(ok(t.kube, "get", "jobset", "train", "-n", t.team_a, "-o", "json"))
        assert not body["spec"].get("suspend") and not any(
            key.startswith("trainguard.dev/") and key != "trainguard.dev/policy"
            for key in body["metadata"].get("annotations") or {}), body["metadata"]
    finally:
        stop.set()
        await asyncio.wait_for(running, 60)
