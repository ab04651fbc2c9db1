"""A restart of ours on the simulated cluster never leaves a JobSet suspended (``KubeScheduler``
against the real JobSet and Job controllers, kwok nodes).

The restart suspends the JobSet (the JobSet controller suspends its Jobs, the Job controller deletes
their pods) and resumes it once the pods are gone. Two kinds of pod outlive the suspend here:
- one of the JobSet's pods stuck Terminating (a finalizer: what a pod on a dead GPU node does, whose
  kubelet never confirms the deletion). It counts as gone; the Job controller creates its
  replacement beside it once the JobSet is resumed;
- a pod of the JobSet that the suspend does not take away (owned by the JobSet itself, so no Job
  controller deletes it; a controller that is down does the same). The resume waits for it at most
  ``restart_wait_s`` after the suspend, then resumes anyway.
Before: the restart gave up after ``restart_wait_s`` and left the JobSet suspended for good.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import pytest

from tests.support.kube_cluster import JOBSET_NAME_LABEL, SimCluster
from trainguard.k8s import client
from trainguard.k8s.kubejobs import common, scheduler

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.timeout(300)]

FINALIZER = "trainguard.dev/test-stays-terminating"
"""Keeps a deleted pod Terminating (kwok deletes it, the finalizer holds it): a node that never confirms."""
WAIT_S = 120.0
BOUND_S = 6.0
T = TypeVar("T")


async def _until(sim: SimCluster, what: str, probe: Callable[[], T | None]) -> T:
    """``probe``'s first value other than None/False, polled off the event loop (the adapter's watches run)."""
    return await asyncio.to_thread(sim.wait, what, probe, WAIT_S)


def _job_pods(sim: SimCluster, ns: str) -> list[dict[str, Any]]:
    """The JobSet's pods made by its Jobs, Terminating ones included."""
    return [p for p in sim.list_objects("pods", ns, f"{JOBSET_NAME_LABEL}=train")
            if any(ref.get("kind") == "Job" for ref in p["metadata"].get("ownerReferences") or [])]


@pytest.fixture
async def adapter(sim_cluster: SimCluster, sim_namespace: str) -> AsyncIterator[scheduler.KubeScheduler]:
    kube = scheduler.KubeScheduler(await client.load_api_client(str(sim_cluster.kubeconfig)),
                                   namespaces=(sim_namespace,), restart_wait_s=BOUND_S)
    kube.start()
    try:
        yield kube
    finally:
        await kube.close()


async def test_a_restart_resumes_the_jobset_past_a_pod_stuck_terminating_and_a_pod_that_stays(
        sim_cluster: SimCluster, sim_namespace: str, adapter: scheduler.KubeScheduler) -> None:
    sim, ns = sim_cluster, sim_namespace
    sim.create_jobset("train", ns, replicated_jobs=(("workers", 1, 2),), gpus=4,
                      annotations={"trainguard.dev/policy": "gpu"})
    def two_running() -> list[dict[str, Any]] | None:
        pods = [p for p in _job_pods(sim, ns) if p.get("status", {}).get("phase") == "Running"]
        return pods if len(pods) == 2 else None

    first = await _until(sim, "2 running pods", two_running)
    stuck = first[0]["metadata"]["name"]
    jobset = sim.get("jobset", "train", ns) or {}
    stays = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "train-stays", "namespace": ns, "labels": {JOBSET_NAME_LABEL: "train"},
        "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train",
                             "uid": jobset["metadata"]["uid"], "controller": True}]},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}
    sim.apply(stays)
    wid = common.workload_id(ns, "JobSet", "train")
    try:
        sim.kubectl("patch", "pod", stuck, "-n", ns, "--type=merge", "-p",
                    json.dumps({"metadata": {"finalizers": [FINALIZER]}}))
        await _until(sim, "the pod that stays running", lambda: ((sim.get("pod", "train-stays", ns) or {}).get(
            "status") or {}).get("phase") == "Running")

        started = time.monotonic()
        await adapter.requeue(wid)  # before: SchedulerError "pods still present", left suspended
        took = time.monotonic() - started

        body = sim.get("jobset", "train", ns) or {}
        notes = body["metadata"].get("annotations") or {}
        assert not body["spec"].get("suspend"), body["spec"]
        assert notes.get(common.RESTARTS_ANNOTATION) == "1"
        assert common.SUSPENDED_BY_ANNOTATION not in notes and common.SUSPENDED_AT_ANNOTATION not in notes
        assert BOUND_S - 1.0 <= took < BOUND_S + 30.0, took  # it waited for the pod that stays, bounded
        job = await adapter.get_job(wid)
        assert job.attempt == 1 and not job.held

        old = {p["metadata"]["uid"] for p in first}

        def replaced() -> list[dict[str, Any]] | None:
            pods = [p for p in _job_pods(sim, ns) if p["metadata"]["uid"] not in old
                    and not p["metadata"].get("deletionTimestamp") and p.get("status", {}).get("phase") == "Running"]
            return pods if len(pods) == 2 else None

        again = await _until(sim, "2 new running pods beside the one stuck Terminating", replaced)
        assert len(again) == 2
        held_back = sim.get("pod", stuck, ns) or {}
        assert held_back["metadata"].get("deletionTimestamp"), "the stuck pod is still Terminating"
    finally:
        if sim.get("pod", stuck, ns) is not None:
            sim.kubectl("patch", "pod", stuck, "-n", ns, "--type=json", "-p",
                        json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]))

