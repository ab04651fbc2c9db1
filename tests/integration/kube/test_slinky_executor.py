"""Slurm on Slinky: a lemon node's cordon is a step of the executor, on the real local Slurm cluster
and the real kube-apiserver.

The product's engine runs in-process over ``k8s.slinky_nodes.SlinkyScheduler`` around the real
Slurm adapter, as ``trainguard operator --slinky-namespace`` wires it. Each Slurm node of the local
cluster gets a Kubernetes Node and a slurmd Pod object scheduled onto it, as slurm-operator would
create them (no kubelet is needed: only the map and the cordon are under test; Slinky's own drain
of the Slurm node is slurm-operator's, not ours). Two jobs fail with an Xid on the same node, so it
is a lemon the second advice takes out of service under a policy that allows only ``cordonNode``:

- Action: the cordon is an action row whose intent is committed before the Node is patched; the
  Node carries our reason in Slinky's annotation; Slurm itself is not drained by us; after
  ``undrainAfter`` the sweep uncordons it (a ``resume_node`` row), and the Node is back as it was.
- a Node a person cordoned first (their reason) is left alone: the step is skipped, their cordon
  and reason stay, and nothing of ours is ever lifted there.
- the cluster switch off: the advice is recorded, the Node is not touched.

Before this, the operator cordoned when the advice was recorded, outside the executor: no intent,
no limits, no switch check, and nothing ever uncordoned.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import kube
from tests.support.slurm import SlurmCluster, parse_scontrol_line
from trainguard import engine as engine_mod
from trainguard import settings as settings_mod
from trainguard.detect import catalog as catalog_mod
from trainguard.k8s import client, slinky, slinky_nodes
from trainguard.model import actions, clock, vocab
from trainguard.policy import loader
from trainguard.schedulers import slurm_local
from trainguard.store import database

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.slurm, pytest.mark.timeout(420)]

LEMON = "node3"
UNDRAIN_AFTER_S = 4
POLICY = """apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {{name: {name}}}
spec:
  mode: Action
  selector: {{accounts: [{account}]}}
  exclusion:
    lemonNodeThreshold: 1
    drainLemonNodes: true
    undrainAfter: {undrain}s
  actions: {{allowed: [stop, cordonNode]}}
  blastRadius: {{maxDrainedShare: 0.5}}
"""
XID = ('echo "$(date "+%b %d %H:%M:%S") $SLURMD_NODENAME kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=$$, '
       'name=python, GPU has fallen off the bus." >&2; exit 1')


@dataclass
class World:
    cluster: SlurmCluster
    kube: kube.LocalKube
    namespace: str
    kube_nodes: dict[str, str]
    """Slurm node -> its Kubernetes Node's name."""
    workdir: Path
    account: str

    def node(self, slurm_node: str) -> dict[str, Any]:
        out = self.kube.kubectl("get", "node", self.kube_nodes[slurm_node], "-o", "json")
        assert out.returncode == 0, out.stderr
        return dict(json.loads(out.stdout))

    def submit_xid(self) -> str:
        return self.cluster.submit(f"#!/bin/bash\n{XID}\n", "--comment=trainguard max-retries=0",
                                   f"--account={self.account}", f"--nodelist={LEMON}", "--nodes=1",
                                   f"--output={self.workdir}/slurm-%j.out")


def _ok(result: Any) -> None:
    assert result.returncode == 0, result.stderr


@pytest.fixture
def world(slurm_cluster: SlurmCluster, kube_api: kube.LocalKube, tmp_path: Path) -> Any:
    namespace = kube.unique_name("slinky")
    _ok(kube_api.kubectl("create", "namespace", namespace))
    kube_nodes = {n: kube.unique_name(f"gpu-{n}") for n in slurm_cluster.nodes}
    for slurm_node, node in kube_nodes.items():
        _ok(kube_api.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}})))
        _ok(kube_api.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"slurm-worker-{slurm_node}", "namespace": namespace, "labels": {
                "app.kubernetes.io/name": "slurmd", slinky.POD_HOSTNAME_LABEL: slurm_node}},
            "spec": {"nodeName": node, "hostname": slurm_node, "automountServiceAccountToken": False,
                     "containers": [{"name": "slurmd", "image": "ghcr.io/slinkyproject/slurmd:25.11"}]}})))
    workdir = tmp_path / "jobs"
    workdir.mkdir()
    workdir.chmod(0o777)
    try:
        yield World(slurm_cluster, kube_api, namespace, kube_nodes, workdir, f"slinky-{secrets.token_hex(3)}")
    finally:
        kube_api.kubectl("delete", "namespace", namespace, "--wait=false")
        for node in kube_nodes.values():
            kube_api.kubectl("delete", "node", node, "--wait=false")


@dataclass
class Running:
    engine: engine_mod.Engine
    store: Any


@pytest.fixture
def run_engine(world: World, tmp_path: Path) -> Callable[..., Any]:
    @contextlib.asynccontextmanager
    async def run(*, allow_action: bool = True) -> AsyncIterator[Running]:
        policy = POLICY.format(name=f"slinky-{world.account}", account=world.account, undrain=UNDRAIN_AFTER_S)
        store = await database.open_store(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
        api = await client.load_api_client(str(world.kube.kubeconfig))
        scheduler = slinky_nodes.SlinkyScheduler(slurm_local.open_local(env=world.cluster.env), api, world.namespace)
        engine = engine_mod.Engine(
            scheduler, store, loader.parse_text(policy, "test"), catalog_mod.load_catalog(),
            clock_=clock.SystemClock(),
            settings=settings_mod.EngineSettings(allow_action=allow_action, discovery_interval_s=0.5))
        stop = asyncio.Event()
        task = asyncio.create_task(engine.run(stop))
        try:
            yield Running(engine, store)
        finally:
            stop.set()
            await asyncio.wait_for(task, 60)
            await api.close()
            await store.close()
    return run


async def until(check: Callable[[], Awaitable[bool]], what: str, within_s: float = 120.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not await check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.3)


async def _advice_of(running: Running, job: str) -> list[Any]:
    return [r for r in await running.store.audit_records(kind=vocab.AuditKind.ADVICE) if r.workload.endswith(f"/{job}")]


async def _lemon_advice(world: World, running: Running) -> dict[str, Any]:
    """Two Xid jobs on the same node: the second one's advice names it a lemon."""
    for n in (1, 2):
        job = world.submit_xid()

        async def advised(job: str = job) -> bool:
            return bool(await _advice_of(running, job))
        await until(advised, f"the advice of Xid job {n} ({job})")
    [item] = await _advice_of(running, job)
    assert item.payload["drain_nodes"] == [LEMON], item.payload["reasons"]
    return dict(item.payload)


async def _rows(running: Running, operation: actions.Operation) -> list[actions.ActionRecord]:
    return [r for r in await running.store.actions_by_operation([operation]) if r.args.get("node") == LEMON]


async def _any(running: Running, operation: actions.Operation, done: bool = True) -> bool:
    """Whether a row of ``operation`` on the lemon is done (or, ``done=False``, settled in any way)."""
    return any((r.status is actions.ActionStatus.DONE) if done else (r.status is not actions.ActionStatus.INTENT)
               for r in await _rows(running, operation))


def _slurm_drained_by_us(world: World) -> bool:
    fields = parse_scontrol_line(world.cluster.scontrol("-o", "show", "node", LEMON).strip())
    return fields.get("Reason", "").startswith("trainguard")


async def test_a_lemons_cordon_is_an_executor_step_lifted_by_undrain_after(
        world: World, run_engine: Callable[..., Any]) -> None:
    async with run_engine() as running:
        item = await _lemon_advice(world, running)
        assert item["mode"] == "Action" and item["drain_in_scheduler"], item["reasons"]

        await until(lambda: _any(running, actions.Operation.DRAIN_NODE),
                    "the executor's drain step (a cordon on Slinky) done")
        [step] = await _rows(running, actions.Operation.DRAIN_NODE)
        trail = [(r.payload.get("step"), r.payload.get("status")) for r in await running.store.audit_records(
            workload=step.workload, kind=vocab.AuditKind.ACTION)]
        assert trail.index((step.step, "intent")) < trail.index((step.step, "done")), trail
        node = world.node(LEMON)
        assert node["spec"]["unschedulable"] is True
        reason = node["metadata"]["annotations"][slinky.CORDON_REASON_ANNOTATION]
        assert reason.startswith("trainguard:") and f"Slurm node {LEMON}" in reason
        assert not _slurm_drained_by_us(world)  # the drain in Slurm is Slinky's to make, not ours

        await until(lambda: _any(running, actions.Operation.RESUME_NODE),
                    f"the uncordon after undrainAfter ({UNDRAIN_AFTER_S} s)")
        node = world.node(LEMON)
        assert not node["spec"].get("unschedulable")
        assert slinky.CORDON_REASON_ANNOTATION not in (node["metadata"].get("annotations") or {})


async def test_a_node_a_person_cordoned_is_left_alone(world: World, run_engine: Callable[..., Any]) -> None:
    kube_node = world.kube_nodes[LEMON]
    _ok(world.kube.kubectl("annotate", "node", kube_node, f"{slinky.CORDON_REASON_ANNOTATION}=disk replacement"))
    _ok(world.kube.kubectl("cordon", kube_node))
    async with run_engine() as running:
        item = await _lemon_advice(world, running)

        workload = item["workload"]

        async def closed() -> bool:
            return bool(await running.store.audit_records(workload=workload, kind=vocab.AuditKind.OUTCOME))
        await until(closed, "the advice's outcome")
        # Their cordon already keeps the node out of service: nothing of ours is done to it, so
        # nothing of ours is ever lifted there (a drain row, if any, says it left the node alone).
        assert not await _any(running, actions.Operation.DRAIN_NODE)
        assert all("left alone" in r.error for r in await _rows(running, actions.Operation.DRAIN_NODE))
        assert await _rows(running, actions.Operation.RESUME_NODE) == []
    node = world.node(LEMON)
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"][slinky.CORDON_REASON_ANNOTATION] == "disk replacement"


async def test_with_the_switch_off_the_advice_is_recorded_and_the_node_untouched(
        world: World, run_engine: Callable[..., Any]) -> None:
    async with run_engine(allow_action=False) as running:
        item = await _lemon_advice(world, running)
        assert item["mode"] == "Monitor", item
        assert not await _any(running, actions.Operation.DRAIN_NODE)
    node = world.node(LEMON)
    assert not node["spec"].get("unschedulable")
    assert slinky.CORDON_REASON_ANNOTATION not in (node["metadata"].get("annotations") or {})
