"""Validation before return on the simulated cluster, through the undrain sweep: a node our drain cordoned and
tainted gets our validating taint, our exclusion is lifted, and the site's check runs as a Job whose pod the
real kube-scheduler places on that kwok node (pinned by node affinity, tolerating our taints); kwok's stages
end the pod the way a test tells it (complete, or fail with an exit code), the real Job controller turns that
into the Job's verdict. A passing check puts the node back in service with nothing of ours left on it; a
failing one cordons and taints it again and holds it for repair with the exit code and the pod's log as
evidence. Monitor mode records ``would_validate_node`` and creates no Job. Each state is read back with
``trainguard nodes --format json``.

The drain is the executor's rows written around the adapter's real drain (``our_drain``, as on Slurm); the
clock of the time rule is a ManualClock, everything on the cluster is real.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.schedulers.test_node_lifecycle_slurm import HOUR, T0, W, nodes_json, our_drain
from tests.support.kube_cluster import SimCluster
from trainguard.act import undrain, validate
from trainguard.k8s import client
from trainguard.k8s.kubejobs import node_checks, nodes, scheduler
from trainguard.model import actions, clock, lifecycle, vocab
from trainguard.store import audit, database

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.timeout(600)]

GOOD, BAD = "kwok-node-3", "kwok-node-4"
IMAGE = "trainguard.test/site-gpu-check:1"
"""Never pulled: kwok runs no container, its stages set the pod's ending."""
ROUND_DEADLINE_S = 180.0
"""Real seconds a round may take on a busy 2-core machine (controllers react within seconds when idle)."""
SETTLED = {lifecycle.NodeState.IN_SERVICE, lifecycle.NodeState.HELD_FOR_REPAIR, lifecycle.NodeState.OUT_OF_SERVICE}


def _rule(mode: vocab.Mode = vocab.Mode.ACTION) -> undrain.UndrainRule:
    check = validate.Check(("/usr/local/bin/gpu-check", "--level", "2"), timeout_s=600.0, output_dir="/tmp",
                           image=IMAGE)
    return undrain.UndrainRule(after_s=HOUR, mode=mode, validation=check)


@pytest.fixture
async def adapter(sim_cluster: SimCluster, sim_namespace: str) -> AsyncIterator[scheduler.KubeScheduler]:
    kube = scheduler.KubeScheduler(await client.load_api_client(str(sim_cluster.kubeconfig)),
                                   namespaces=(sim_namespace,), check_namespace=sim_namespace)
    kube.start()
    try:
        yield kube
    finally:
        for node in (GOOD, BAD):  # nothing of ours left on the shared nodes, whatever the test reached
            await kube.unreserve_node(node)
            if nodes.exclusion_of(sim_cluster.get("node", node) or {}) is not None:
                await kube.resume_node(node)
        await kube.close()


async def _sweep_until_submitted(sweeper: undrain.Undrainer, store: audit.AuditStore, node: str,
                                 generation: int) -> str:
    """Sweep until the round's check is submitted; its job id."""
    deadline = time.monotonic() + ROUND_DEADLINE_S
    while True:
        for row in await sweeper.sweep():
            if row.step == f"validate_submit:{node}#1" and row.status is actions.ActionStatus.DONE:
                return str(row.args["job_id"])
        assert time.monotonic() < deadline, await store.actions_for(W, 0, generation)
        await asyncio.sleep(0.5)


async def _until_settled(sweeper: undrain.Undrainer, store: audit.AuditStore, node: str) -> lifecycle.Transition:
    deadline = time.monotonic() + ROUND_DEADLINE_S
    while True:
        await sweeper.sweep()
        state = await store.node_state(node)
        if state is not None and state.state in SETTLED:
            return state
        assert time.monotonic() < deadline, f"{node} still {state.state if state else None} after the deadline"
        await asyncio.sleep(0.5)


def _check_pod(sim: SimCluster, namespace: str, node: str) -> dict[str, Any]:
    """The check's pod once kwok runs it on ``node`` (placed there by the real scheduler)."""
    def running() -> dict[str, Any] | None:
        pods = sim.list_objects("pods", namespace, f"{node_checks.CHECK_LABEL}")
        return next((p for p in pods if p["spec"].get("nodeName") == node
                     and p.get("status", {}).get("phase") == "Running"), None)
    return sim.wait(f"the check pod running on {node}", running, ROUND_DEADLINE_S)


def _taints(sim: SimCluster, node: str) -> set[str]:
    """The node's taints but the one the node controller mirrors a cordon with."""
    obj = sim.get("node", node)
    assert obj is not None
    return {t["key"] for t in obj["spec"].get("taints") or []} - {"node.kubernetes.io/unschedulable"}


def _cordoned(sim: SimCluster, node: str) -> bool:
    obj = sim.get("node", node)
    assert obj is not None
    return bool(obj["spec"].get("unschedulable"))


def _jobs(sim: SimCluster, namespace: str) -> list[dict[str, Any]]:
    return sim.list_objects("jobs", namespace, "app.kubernetes.io/managed-by=trainguard")


async def test_a_check_job_returns_a_good_node_and_holds_a_bad_one(
        sim_cluster: SimCluster, sim_namespace: str, adapter: scheduler.KubeScheduler, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    sim, ns = sim_cluster, sim_namespace
    url = f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}"
    now = clock.ManualClock(T0)
    rules = {"default": _rule()}
    store = await database.open_store(url)
    try:
        sweeper = undrain.Undrainer(adapter, store, now, rules.get, validator=adapter)

        # --- a passing check: the node is back, nothing of ours left on it
        await our_drain(store, adapter, GOOD, 1)
        assert _cordoned(sim, GOOD) and nodes.TAINT_KEY in _taints(sim, GOOD)
        now.advance(HOUR + 10)
        job_id = await _sweep_until_submitted(sweeper, store, GOOD, 1)
        assert job_id.startswith(f"{ns}/{node_checks.JOB_PREFIX}")
        # our validating taint keeps user pods off; our cordon and suspect taint are lifted for the check
        assert _taints(sim, GOOD) == {node_checks.VALIDATING_TAINT} and not _cordoned(sim, GOOD)
        assert (await nodes_json(url, capsys))[GOOD] == "validating"
        pod = _check_pod(sim, ns, GOOD)
        assert {t["key"] for t in pod["spec"]["tolerations"]} >= {node_checks.VALIDATING_TAINT, nodes.TAINT_KEY,
                                                                  "node.kubernetes.io/unschedulable"}
        sim.write_pod_log(ns, pod["metadata"]["name"], ["gpu-check: 8/8 GPUs pass level 2"])
        sim.complete_pod(ns, pod["metadata"]["name"])
        state = await _until_settled(sweeper, store, GOOD)
        assert state.event is lifecycle.NodeEvent.RESUMED
        events = [t.event.value for t in await store.node_transitions(GOOD)]
        assert events[-3:] == ["validation-started", "validation-passed", "resumed"]
        passed = next(t for t in await store.node_transitions(GOOD) if t.event.value == "validation-passed")
        assert passed.evidence["job_id"] == job_id and "8/8 GPUs pass" in passed.evidence["output_tail"]
        assert _taints(sim, GOOD) == set() and not _cordoned(sim, GOOD)
        assert not next(n for n in await adapter.list_nodes() if n.name == GOOD).drained
        assert (await nodes_json(url, capsys))[GOOD] == "in-service"

        # --- a failing check: cordoned and tainted again, held for repair with the exit code and the log
        await our_drain(store, adapter, BAD, 2)
        job_id = await _sweep_until_submitted(sweeper, store, BAD, 2)
        pod = _check_pod(sim, ns, BAD)
        sim.write_pod_log(ns, pod["metadata"]["name"], ["gpu-check: GPU 3 failed: 12 uncorrectable ECC errors"])
        sim.fail_pod(ns, pod["metadata"]["name"], exit_code=3, reason="Error", uid=pod["metadata"]["uid"])
        state = await _until_settled(sweeper, store, BAD)
        assert state.state is lifecycle.NodeState.HELD_FOR_REPAIR
        assert state.evidence["exit_code"] == 3 and "uncorrectable ECC" in state.evidence["output_tail"]
        assert state.evidence["job_id"] == job_id
        snap = next(n for n in await adapter.list_nodes() if n.name == BAD)
        assert snap.drained and snap.reason.startswith("trainguard: failed validation (exit 3)")
        assert _cordoned(sim, BAD) and _taints(sim, BAD) == {nodes.TAINT_KEY}  # our validating taint is gone
        assert (await nodes_json(url, capsys)) == {GOOD: "in-service", BAD: "held-for-repair"}
        now.advance(10 * HOUR)
        await sweeper.sweep()
        assert (await nodes_json(url, capsys))[BAD] == "held-for-repair"  # no rule of time returns it
        assert len(_jobs(sim, ns)) == 2

        # --- Monitor mode: would validate, no Job, the node untouched
        rules["default"] = _rule(vocab.Mode.MONITOR)
        await our_drain(store, adapter, GOOD, 3)
        now.advance(HOUR + 10)
        written = await sweeper.sweep()
        assert [(r.step, r.status) for r in written] == [(f"would_validate_node:{GOOD}",
                                                          actions.ActionStatus.SKIPPED)]
        assert len(_jobs(sim, ns)) == 2
        assert _cordoned(sim, GOOD) and _taints(sim, GOOD) == {nodes.TAINT_KEY}
    finally:
        await store.close()


async def test_a_check_that_cannot_be_scheduled_ends_inconclusive_and_a_node_that_vanishes_too(
        sim_cluster: SimCluster, sim_namespace: str, adapter: scheduler.KubeScheduler, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A person's taint our check does not tolerate keeps its pod Pending: past the round's timeout the Job is
    deleted and the node cordoned and tainted again (out of service, due again one undrainAfter later), the
    scheduler's reason as evidence. A node deleted from the cluster during its round is inconclusive too,
    with nothing left to undo on it."""
    sim, ns = sim_cluster, sim_namespace
    url = f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}"
    now = clock.ManualClock(T0)
    rules = {"default": _rule()}
    store = await database.open_store(url)
    gone = "kwok-node-validate-gone"
    sim.apply({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": gone, "annotations": {"kwok.x-k8s.io/node": "fake"},
                            "labels": {"kubernetes.io/hostname": gone, "type": "kwok"}},
               "spec": {"taints": []},
               "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
                          "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
                          "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                        {"type": "Hostname", "address": gone}]}})
    try:
        sweeper = undrain.Undrainer(adapter, store, now, rules.get, validator=adapter)
        sim.wait(f"{gone} Ready", lambda: sim.node_ready(gone), ROUND_DEADLINE_S)

        # --- cannot be scheduled: waits, then inconclusive at the timeout
        await our_drain(store, adapter, GOOD, 1)
        sim.kubectl("taint", "node", GOOD, "site.example/maintenance=disk:NoSchedule", "--overwrite")
        now.advance(HOUR + 10)
        job_id = await _sweep_until_submitted(sweeper, store, GOOD, 1)

        def unschedulable() -> dict[str, Any] | None:
            pods = sim.list_objects("pods", ns, node_checks.CHECK_LABEL)
            return next((p for p in pods if any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                                                for c in p.get("status", {}).get("conditions") or [])), None)
        sim.wait("the check pod unschedulable", unschedulable, ROUND_DEADLINE_S)
        await sweeper.sweep()
        assert (await nodes_json(url, capsys))[GOOD] == "validating"  # waits within the timeout
        now.advance(600 + 1)
        state = await _until_settled(sweeper, store, GOOD)
        assert (state.state, state.event) == (lifecycle.NodeState.OUT_OF_SERVICE,
                                              lifecycle.NodeEvent.VALIDATION_INCONCLUSIVE)
        assert state.evidence["job_id"] == job_id
        assert str(state.evidence["check_state"]).startswith("Pending, not scheduled")
        sim.wait("the check Job deleted", lambda: not _jobs(sim, ns), ROUND_DEADLINE_S)
        snap = next(n for n in await adapter.list_nodes() if n.name == GOOD)
        assert snap.drained and snap.reason.startswith("trainguard: validation inconclusive")
        assert _taints(sim, GOOD) == {nodes.TAINT_KEY, "site.example/maintenance"}  # the person's taint stays

        # --- the node vanishes during its round
        await our_drain(store, adapter, gone, 2)
        await _sweep_until_submitted(sweeper, store, gone, 2)
        sim.kubectl("delete", "node", gone)
        state = await _until_settled(sweeper, store, gone)
        assert state.event is lifecycle.NodeEvent.VALIDATION_INCONCLUSIVE
        verdict = next(r for r in await store.actions_for(W, 0, 2) if r.step == f"validate_verdict:{gone}#1")
        assert verdict.args["vanished"] is True and verdict.args["verdict"] == "inconclusive"
        unreserved = next(r for r in await store.actions_for(W, 0, 2) if r.step == f"validate_unreserve:{gone}#1")
        assert unreserved.status is actions.ActionStatus.DONE  # nothing left to undo on a node that is gone
        assert (await nodes_json(url, capsys))[GOOD] == "out-of-service"
    finally:
        if "site.example/maintenance" in _taints(sim, GOOD):
            sim.kubectl("taint", "node", GOOD, "site.example/maintenance-")
        sim.kubectl("delete", "node", gone, "--ignore-not-found")
        await store.close()
