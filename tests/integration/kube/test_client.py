"""k8s/client.py against the real kube-apiserver: both ways in reach it with TLS and a token (a
kubeconfig, and kopf's own login turned into the client configuration), and the calls the operator
relies on behave as the server means them: a merge patch of a custom object's status (a null
deletes a key), 409 on a stale resourceVersion, 404 for a missing object, the server's message."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import kopf
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch

from tests.support import kube
from trainguard.k8s import client, operator, recovery

pytestmark = [pytest.mark.integration, pytest.mark.kube]

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def namespace(kube_api: kube.LocalKube) -> Iterator[str]:
    done = kube_api.kubectl("apply", "-k", str(REPO_ROOT / "crds"))
    assert done.returncode == 0, done.stderr
    name = kube.unique_name("tg-client")
    done = kube_api.kubectl("create", "namespace", name)
    assert done.returncode == 0, done.stderr
    yield name
    kube_api.kubectl("delete", "namespace", name, "--wait=false")


async def test_kubeconfig_and_kopf_login_reach_the_server_as_the_same_user(
    kube_api: kube.LocalKube, namespace: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kube_api.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    users = []
    for api in (await client.load_api_client(), client.from_connection_info(operator.login(kopf.OperatorSettings()))):
        async with api:
            review = await k8s.AuthenticationV1Api(api).create_self_subject_review(
                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
            users.append(review.status.user_info.username)
            listed = await k8s.CoreV1Api(api).list_namespace(field_selector=f"metadata.name={namespace}")
            assert [ns.metadata.name for ns in listed.items] == [namespace]
    assert users[0] and users[0] == users[1]


async def test_custom_object_status_merge_patch_conflict_and_not_found(kube_api: kube.LocalKube,
                                                                       namespace: str) -> None:
    body = {"apiVersion": recovery.API_VERSION, "kind": recovery.KIND,
            "metadata": {"name": "one", "namespace": namespace},
            "spec": {"workload": {"kind": "SlurmJob", "id": "7"}}}
    async with await client.load_api_client(str(kube_api.kubeconfig)) as api:
        objects = k8s.CustomObjectsApi(api)
        created = await objects.create_namespaced_custom_object(recovery.GROUP, recovery.VERSION, namespace,
                                                                recovery.PLURAL, body)
        version = created["metadata"]["resourceVersion"]
        patched = await objects.patch_namespaced_custom_object_status(
            recovery.GROUP, recovery.VERSION, namespace, recovery.PLURAL, "one",
            {"metadata": {"resourceVersion": version}, "status": {"attempt": 2, "policy": "p"}},
            _content_type=client.MERGE_PATCH)
        assert (patched["status"]["attempt"], patched["status"]["policy"]) == (2, "p")
        patched = await client.merge_patch(
            objects.patch_namespaced_custom_object_status,
            recovery.GROUP, recovery.VERSION, namespace, recovery.PLURAL, "one", body={"status": {"policy": None}})
        assert patched["status"]["attempt"] == 2
        assert patched["status"].get("policy", "") == "", "a null deletes the key (the schema default may refill it)"

        with pytest.raises(client.ApiException) as stale:
            await objects.patch_namespaced_custom_object_status(
                recovery.GROUP, recovery.VERSION, namespace, recovery.PLURAL, "one",
                {"metadata": {"resourceVersion": version}, "status": {"attempt": 3}}, _content_type=client.MERGE_PATCH)
        assert client.is_conflict(stale.value) and not client.is_retryable(stale.value)
        assert "the object has been modified" in client.message_of(stale.value)

        with pytest.raises(client.ApiException) as again:
            await objects.create_namespaced_custom_object(recovery.GROUP, recovery.VERSION, namespace,
                                                          recovery.PLURAL, body)
        assert client.is_conflict(again.value), "AlreadyExists is a 409 too"

        with pytest.raises(client.ApiException) as missing:
            await objects.get_namespaced_custom_object(recovery.GROUP, recovery.VERSION, namespace,
                                                       recovery.PLURAL, "two")
        assert client.is_not_found(missing.value)
        assert json.loads(missing.value.body)["reason"] == "NotFound"


async def test_a_watch_outlives_the_time_bound_of_single_calls(kube_api: kube.LocalKube, namespace: str) -> None:
    """Streams (watches, followed logs) are bounded by the server's ``timeoutSeconds``, not by the
    client's bound for single calls: the watch below runs past that bound and ends normally."""
    async with await client.load_api_client(str(kube_api.kubeconfig)) as api:
        api.timeout_s = 0.2
        core = k8s.CoreV1Api(api)
        await core.create_namespaced_config_map(namespace, client.body_of(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "seen"}, "data": {"k": "v"}}))
        events = []
        async with watch.Watch().stream(core.list_namespaced_config_map, namespace, timeout_seconds=2) as stream:
            async for event in stream:
                events.append((event["type"], event["object"].metadata.name))
        assert ("ADDED", "seen") in events


async def test_an_error_answer_the_caller_reads_itself_raises_too(kube_api: kube.LocalKube, namespace: str) -> None:
    """A call made with ``_preload_content=False`` (the adapter reads such bodies as raw JSON) raises on a
    non-2xx answer like any other: unchecked, a 404 read as an object made of the server's Status, and a
    refused listing read as an empty one (a watch cache emptied of every workload)."""
    async with await client.load_api_client(str(kube_api.kubeconfig)) as api:
        objects, core = k8s.CustomObjectsApi(api), k8s.CoreV1Api(api)
        with pytest.raises(client.ApiException) as missing:
            await objects.get_namespaced_custom_object(recovery.GROUP, recovery.VERSION, namespace, recovery.PLURAL,
                                                       "absent", _preload_content=False)
        assert client.is_not_found(missing.value)
        assert '"absent" not found' in client.message_of(missing.value)

        with pytest.raises(client.ApiException) as refused:
            await core.list_namespaced_pod(namespace, field_selector="spec.noSuchField=x", _preload_content=False)
        assert client.status_of(refused.value) == 400
        assert "noSuchField" in client.message_of(refused.value)

        listed = await core.list_namespaced_pod(namespace, _preload_content=False)
        assert json.loads(await client.read_body(listed))["kind"] == "PodList"
