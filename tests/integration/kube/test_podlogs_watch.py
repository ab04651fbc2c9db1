"""The pod-log book's pod discovery on the real kube-apiserver (no kubelet: pods are not run, their status is
what a kubelet would write): pods of the workload are listed and watched with their node and rank, an
ending becomes one termination line, and a deleted pod's streams are closed. Following real logs is in
tests/integration/kube_cluster/test_podsignals.py (kwok serves them)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import kubernetes_asyncio.client
import pytest

from tests.support import kube
from trainguard.k8s import client, podlog_parts, podlogs, pods
from trainguard.model import clock

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.timeout(kube.BUILD_TIMEOUT_S)]


@pytest.fixture
async def api(kube_api: kube.LocalKube) -> AsyncIterator[kubernetes_asyncio.client.ApiClient]:
    api_client = await client.load_api_client(str(kube_api.kubeconfig))
    async with api_client:
        yield api_client


async def _until(what: str, probe: Callable[[], bool], within: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not probe():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def _kubectl(k: kube.LocalKube, *args: str, input: str | None = None) -> None:
    done = k.kubectl(*args, input=input)
    assert done.returncode == 0, done.stderr


async def test_pods_are_watched_and_an_ending_is_one_line(kube_api: kube.LocalKube,
                                                          api: kubernetes_asyncio.client.ApiClient) -> None:
    ns = kube.unique_name("podlogs")
    _kubectl(kube_api, "create", "namespace", ns)
    try:
        make, _source = podlogs.books(api, podlog_parts.Config(retry_s=0.2, max_backoff_s=1.0))
        book = make("kube/train", "train", clock.SystemClock(), None)
        assert isinstance(book, podlogs.PodLogBook)
        book.add(f"k8s://{ns}/JobSet/train", "stdout", None)
        labels = {pods.JOBSET_NAME: "train", pods.JOBSET_GLOBAL_INDEX: "1"}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "train-w-1-0", "namespace": ns, "labels": labels},
               "spec": {"nodeName": "gpu-a07", "containers": [{"name": "main", "image": "none"}]}}
        other = {**pod, "metadata": {"name": "unrelated", "namespace": ns, "labels": {pods.JOBSET_NAME: "other"}}}
        _kubectl(kube_api, "create", "-f", "-", input=json.dumps(pod))
        _kubectl(kube_api, "create", "-f", "-", input=json.dumps(other))
        await _until("the pod in the book", lambda: [v.name for v in book._views.values()] == ["train-w-1-0"])
        (view,) = book._views.values()
        assert (view.node, view.rank) == ("gpu-a07", 1)  # the JobSet cannot be read here: ranks from labels

        status = {"status": {"phase": "Failed", "containerStatuses": [{
            "name": "main", "image": "none", "imageID": "", "ready": False, "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": "2026-12-01T20:00:00Z",
                                     "finishedAt": "2026-12-01T20:00:05Z"}}}]}}
        _kubectl(kube_api, "patch", "pod", "train-w-1-0", "-n", ns, "--subresource=status", "--type=merge",
                 "-p", json.dumps(status))
        got: list[tuple[str, str | None, int | None]] = []

        async def poll() -> None:
            while not got:
                for _stream, lines in await book.read():
                    got.extend((ln.text, ln.node, ln.rank) for ln in lines)
                await asyncio.sleep(0.1)

        await asyncio.wait_for(poll(), timeout=60)
        assert got == [("trainguard: pod train-w-1-0 container main on gpu-a07 ended: reason=OOMKilled exitCode=137 "
                        "signal=SIGKILL", "gpu-a07", 1)]
        _kubectl(kube_api, "label", "pod", "train-w-1-0", "-n", ns, "touched=yes")  # a later event: no second line
        _kubectl(kube_api, "delete", "pod", "train-w-1-0", "-n", ns, "--wait=false", "--grace-period=0", "--force")
        await _until("the pod gone from the book",
                     lambda: not book._views and all(f.task is None for f in book._follows.values()))
        assert [ln for _s, lines in await book.read() for ln in lines] == []
        book.close()
        await book.wait_closed()
    finally:
        kube_api.kubectl("delete", "namespace", ns, "--wait=false")
