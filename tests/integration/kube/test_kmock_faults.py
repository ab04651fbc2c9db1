"""API faults a real server does not produce on demand, injected with kmock: no duplicate actions.

The whole operator (``trainguard.k8s.operator.run``: kopf, the engine, the status loop, Events)
runs in the test's event loop against ``kmock.KubernetesEmulator`` (over HTTP, through a kubeconfig:
nothing of ours is patched) and against the real local Slurm cluster. While an Action-mode policy
recovers a failing job, the emulator answers:

- 500 to the first status writes of WorkloadRecovery objects (kmock still stores the write: the
  "applied but the answer was lost" case, the nastiest for duplicates);
- 429 to the first Event posts;
- a dropped watch: the first watch streams of RecoveryPolicy and WorkloadRecovery objects end
  after the initial listing, so kopf reconnects and sees every object again, mid-recovery.

The Slurm outcome and the audit log must show one recovery: one advice, each executor step once,
one restart; and no Event reason is posted twice for the same generation.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import secrets
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from tests.support.slurm import SlurmCluster
from trainguard import settings as settings_mod
from trainguard.k8s import operator
from trainguard.store import database

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.timeout(300)]

GROUP = "trainguard.dev/v1alpha1"
POLICIES = kmock.resource(f"{GROUP}/recoverypolicies")
RECOVERIES = kmock.resource(f"{GROUP}/workloadrecoveries")
EVENTS = kmock.resource("v1/events")
NAMESPACE = "default"
WAIT_S = 120.0

JOB_SCRIPT = """#!/bin/bash
#SBATCH --comment="trainguard policy={policy}"
#SBATCH --nodes=1
echo "start restarts=${{SLURM_RESTART_COUNT:-0}} on $SLURMD_NODENAME"
if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then
  sleep 2
  echo "$(date '+%b %d %H:%M:%S') $SLURMD_NODENAME kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=$$, name=python, \
GPU has fallen off the bus." >&2
  exit 1
fi
echo "iteration 2 on $SLURMD_NODENAME"
"""


class Emulator(kmock.KubernetesEmulator):  # type: ignore[misc]
    """kmock's emulator plus the server-side metadata kopf and the operator read: uid,
    creationTimestamp, generation and a resourceVersion bumped on every write; generateName."""

    _versions = itertools.count(1)

    async def _handle(self, request: Any) -> Any:
        data = request.data if isinstance(request.data, dict) else None
        if request.resource is not None and data is not None:
            metadata = data.setdefault("metadata", {})
            if request.action == kmock.action.CREATE:
                if not metadata.get("name") and metadata.get("generateName"):
                    metadata["name"] = f"{metadata['generateName']}{uuid.uuid4().hex[:6]}"
                metadata.setdefault("uid", str(uuid.uuid4()))
                metadata.setdefault("generation", 1)
                metadata.setdefault("creationTimestamp", datetime.datetime.now(datetime.UTC).isoformat())
            if request.action in (kmock.action.CREATE, kmock.action.UPDATE):
                metadata["resourceVersion"] = str(next(self._versions))
        return await super()._handle(request)


def first(count: int) -> Callable[[Any], bool]:
    """A request filter that matches the first ``count`` requests it is asked about."""
    seen = itertools.count()
    return lambda _request: next(seen) < count


@pytest.fixture
async def emulator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Emulator]:
    emulator = Emulator()
    async with emulator, kmock.Server(emulator) as server:
        emulator.resources[f"{GROUP}/recoverypolicies"] = kmock.ResourceInfo(
            kind="RecoveryPolicy", singular="recoverypolicy", namespaced=True,
            verbs={"list", "watch", "get", "patch"}, subresources={"status"})
        emulator.resources[f"{GROUP}/workloadrecoveries"] = kmock.ResourceInfo(
            kind="WorkloadRecovery", singular="workloadrecovery", namespaced=True,
            verbs={"list", "watch", "get", "patch", "create", "delete"}, subresources={"status"})
        emulator.resources["v1/events"] = kmock.ResourceInfo(kind="Event", namespaced=True, verbs={"create", "list"})
        emulator.resources["v1/namespaces"] = kmock.ResourceInfo(kind="Namespace", namespaced=False,
                                                                verbs={"list", "watch", "get"})
        emulator.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = kmock.ResourceInfo(
            kind="CustomResourceDefinition", namespaced=False, verbs={"list", "watch", "get"})
        emulator.objects[kmock.resource("v1/namespaces"), None, NAMESPACE] = {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
            "clusters": [{"name": "kmock", "cluster": {"server": str(server.url).rstrip("/")}}],
            "users": [{"name": "kmock", "user": {"token": "kmock"}}],
            "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock", "namespace": NAMESPACE}}],
        }))
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        yield emulator


def objects(emulator: Emulator, resource: Any) -> list[dict[str, Any]]:
    return [dict(obj.raw) for (res, _, _), obj in emulator.objects.items() if res == resource and not obj.deleted]


async def test_throttling_errors_and_dropped_watches_cause_no_duplicate_actions(
    emulator: Emulator, slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in ("SLURM_CONF", "SLURM_JWT"):
        monkeypatch.setenv(key, slurm_cluster.env[key])
    policy = f"kmock-{secrets.token_hex(4)}"
    emulator.objects[POLICIES, NAMESPACE, policy] = {
        "apiVersion": GROUP, "kind": "RecoveryPolicy",
        "metadata": {"name": policy, "namespace": NAMESPACE, "generation": 1, "resourceVersion": "1", "uid": "p1"},
        "spec": {"mode": "Action"},
    }
    status_500 = emulator["patch", RECOVERIES, kmock.subresource("status"), first(3)] << 500
    events_429 = emulator["post", EVENTS, first(3)] << 429
    dropped = emulator[kmock.action.WATCH, POLICIES, first(2)] << ()
    dropped_wr = emulator[kmock.action.WATCH, RECOVERIES, first(2)] << ()

    db = tmp_path / "audit.db"
    config = operator.OperatorConfig(
        scheduler="slurm-local", namespaces=(NAMESPACE,), workload_namespace=NAMESPACE,
        engine=settings_mod.EngineSettings(allow_action=True, discovery_interval_s=1.0),
        db_url=f"sqlite+aiosqlite:///{db}", status_interval_s=0.5,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(operator.run(config, stop_flag=stop))
    try:
        job_id = await asyncio.to_thread(slurm_cluster.submit, JOB_SCRIPT.format(policy=policy))
        job = await asyncio.to_thread(
            slurm_cluster.wait_for, job_id, lambda j: j.get("JobState") == "COMPLETED" and j.get("Restarts") == "1",
            WAIT_S, 0.5, False)
        assert job["ExcNodeList"] != "(null)"

        async def converged() -> dict[str, Any]:
            while True:
                for obj in objects(emulator, RECOVERIES):
                    st = obj.get("status") or {}
                    if obj["spec"]["workload"]["id"] == job_id and st.get("phase") == "Succeeded":
                        return obj
                await asyncio.sleep(0.2)

        recovered = await asyncio.wait_for(converged(), WAIT_S)
        assert recovered["status"]["advice"]["disposition"] == "Converged"
        assert recovered["status"]["restarts"] == 1
    finally:
        stop.set()
        await asyncio.wait_for(running, 60)

    # the faults really happened
    assert len(status_500) >= 1 and len(events_429) >= 1, (len(status_500), len(events_429))
    assert len(dropped) >= 1 and len(dropped_wr) >= 1, (len(dropped), len(dropped_wr))

    # one recovery, whatever the API did
    store = await database.open_store(f"sqlite+aiosqlite:///{db}")
    try:
        records = await store.audit_records(workload=recovered["metadata"]["annotations"]["trainguard.dev/workload"])
    finally:
        await store.close()
    kinds = [str(r.kind) for r in records]
    assert kinds.count("advice") == 1, kinds
    done_steps = [r.payload.get("step") for r in records if r.kind == "action" and r.payload.get("status") == "done"]
    assert done_steps and len(done_steps) == len(set(done_steps)), done_steps
    posted = [e for e in objects(emulator, EVENTS) if e["involvedObject"]["name"] == recovered["metadata"]["name"]]
    reasons = [e["reason"] for e in posted]
    assert len(reasons) == len(set(reasons)), reasons
    assert reasons.count("RecoveryStarted") <= 1
