"""The operator's HTTP API asks the real kube-apiserver who a bearer token is (TokenReview) and
what that user's own RBAC allows on RecoveryPolicies (SubjectAccessReview): ``patch`` -> write,
``list`` -> read, neither -> 403; an unknown token -> 401. The reviewing identity is a
ServiceAccount bound to exactly the two ``create`` rules the shipped ClusterRole grants for this."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.integration.http.test_http_api import Client, seed, serve
from tests.support.kube import LocalKube, unique_name
from trainguard.k8s import client as k8s_client
from trainguard.k8s import review
from trainguard.store import database

pytestmark = [pytest.mark.integration, pytest.mark.kube]


def apply(kube: LocalKube, manifest: str) -> None:
    done = kube.kubectl("apply", "-f", "-", input=manifest)
    assert done.returncode == 0, done.stderr


async def test_tokens_are_reviewed_by_kubernetes_and_rbac_decides_the_role(kube_api: LocalKube,
                                                                            tmp_path: Path) -> None:
    ns = unique_name("tg-api")
    role = unique_name("tg-reviewer")
    apply(kube_api, f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: operator, namespace: {ns}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: reader, namespace: {ns}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: writer, namespace: {ns}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: nobody, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {role}}}
rules:
  - apiGroups: [authentication.k8s.io]
    resources: [tokenreviews]
    verbs: [create]
  - apiGroups: [authorization.k8s.io]
    resources: [subjectaccessreviews]
    verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {role}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}
subjects: [{{kind: ServiceAccount, name: operator, namespace: {ns}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: policies-read, namespace: {ns}}}
rules: [{{apiGroups: [trainguard.dev], resources: [recoverypolicies], verbs: [get, list, watch]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: policies-write, namespace: {ns}}}
rules: [{{apiGroups: [trainguard.dev], resources: [recoverypolicies], verbs: [get, list, watch, patch]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: reader, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: policies-read}}
subjects: [{{kind: ServiceAccount, name: reader, namespace: {ns}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: writer, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: policies-write}}
subjects: [{{kind: ServiceAccount, name: writer, namespace: {ns}}}]
""")
    store = await database.open_store(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    kubeconfig = kube_api.write_token_kubeconfig(kube_api.create_token("operator", ns), tmp_path / "kubeconfig")
    client = await k8s_client.load_api_client(str(kubeconfig))
    server = None
    try:
        await seed(store, 2)
        reviewer = review.KubeReviewer(lambda: client, ns)
        # a pod listening on 0.0.0.0 without a token file: every caller is reviewed by Kubernetes
        server = await serve(store, listen="0.0.0.0:8080", operator=True, reviewer=reviewer)
        reader, writer, nobody = (kube_api.create_token(sa, ns) for sa in ("reader", "writer", "nobody"))
        async with aiohttp.ClientSession() as session:
            c = Client(session, server.url)
            status, body, _ = await c.get("/api/v1/workloads")
            assert status == 401
            status, body, _ = await c.get("/api/v1/workloads", token="not-a-kubernetes-token-at-all")
            assert status == 401 and body["error"] == "invalid bearer token"
            status, body, _ = await c.get("/api/v1/workloads", token=nobody)
            assert status == 403 and f"system:serviceaccount:{ns}:nobody may not list" in body["error"]
            status, body, _ = await c.get("/api/v1/whoami", token=reader)
            assert body == {"user": f"kube:system:serviceaccount:{ns}:reader", "role": "read", "auth": "kubernetes"}
            status, body, _ = await c.get("/api/v1/workloads", token=reader)
            assert status == 200 and len(body["items"]) == 2
            path = "/api/v1/workloads/slurm/c0/0/acknowledge"
            status, body = await c.post(path, {"note": "seen"}, token=reader)
            assert status == 403 and "read role" in body["error"]
            status, body, _ = await c.get("/api/v1/whoami", token=writer)
            assert body["role"] == "write"
            status, body = await c.post(path, {"note": "seen"}, token=writer)
            assert status == 200, body
            assert body["audit"]["payload"]["by"] == f"kube:system:serviceaccount:{ns}:writer"
    finally:
        if server is not None:
            await server.stop()
        await client.close()
        await store.close()
        kube_api.kubectl("delete", "clusterrolebinding,clusterrole", role, "--ignore-not-found")
        kube_api.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found")
