"""The executor's cordon of a lemon node, carried out by SchedMD's slurm-operator on Slurm 26.05.

As ``tests/integration/kube/test_slinky_executor.py``, but nothing is made by hand: the NodeSet pods,
their Kubernetes nodes and the Slurm nodes' comments are slurm-operator's
(``hack/local-kube.sh up --cluster --slinky``). The product's engine runs in-process over
``k8s.slinky_nodes.SlinkyScheduler`` around the real Slurm adapter, as ``trainguard operator
--slinky-namespace`` wires it. Two Xid jobs on the same Slurm node make it a lemon under an Action
policy that allows ``cordonNode`` (``lemonNodeThreshold: 2``: with 1 the first job's advice would
already cordon the node, and the second job would find it drained, or be advised after our drain):
the executor's drain step (intent before the write) cordons its Kubernetes node with our reason,
slurm-operator drains the Slurm node with
``slurm-operator: trainguard: ...``; after ``undrainAfter`` our uncordon makes slurm-operator return it
to service. With the cluster switch off nothing is touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import slinky as sl
from trainguard import engine as engine_mod
from trainguard import settings as settings_mod
from trainguard.detect import catalog as catalog_mod
from trainguard.k8s import client, slinky, slinky_nodes
from trainguard.model import actions, clock, vocab
from trainguard.policy import loader
from trainguard.schedulers import slurm_local
from trainguard.store import database

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.slinky,
              pytest.mark.timeout(900)]

LEMON = sl.SLURM_NODES[2]
UNDRAIN_AFTER_S = 25
"""Long enough to see slurm-operator's drain before our uncordon lifts it."""
POLICY = """apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {{name: {name}}}
spec:
  mode: Action
  selector: {{accounts: [{account}]}}
  exclusion:
    lemonNodeThreshold: 2
    drainLemonNodes: true
    undrainAfter: {undrain}s
  actions: {{allowed: [stop, cordonNode]}}
  blastRadius: {{maxDrainedShare: 0.5}}
"""
ANNOTATION_PATH = "jsonpath={.metadata.annotations.nodeset\\.slinky\\.slurm\\.net/node-cordon-reason}"
XID = ('echo "$(date "+%b %d %H:%M:%S") $SLURMD_NODENAME kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=$$, '
       'name=python, GPU has fallen off the bus." >&2; exit 1')


async def until(check: Callable[[], Awaitable[bool]], what: str, within_s: float = 180.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not await check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.3)


@contextlib.asynccontextmanager
async def running_engine(cluster: sl.SlinkyCluster, tmp_path: Path, account: str,
                         allow_action: bool) -> AsyncIterator[Any]:
    policy = POLICY.format(name=f"slinky-{account}", account=account, undrain=UNDRAIN_AFTER_S)
    store = await database.open_store(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    api = await client.load_api_client(str(cluster.kube.kubeconfig))
    scheduler = slinky_nodes.SlinkyScheduler(slurm_local.open_local(env=cluster.env), api, sl.NAMESPACE)
    engine = engine_mod.Engine(
        scheduler, store, loader.parse_text(policy, "test"), catalog_mod.load_catalog(), clock_=clock.SystemClock(),
        settings=settings_mod.EngineSettings(allow_action=allow_action, discovery_interval_s=0.5))
    stop = asyncio.Event()
    assert await asyncio.to_thread(in_service, cluster), f"{LEMON} is not in service at the start"
    task = asyncio.create_task(engine.run(stop))
    try:
        yield store
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        await api.close()
        await store.close()
        await asyncio.to_thread(leave_as_found, cluster, account)


def in_service(cluster: sl.SlinkyCluster) -> bool:
    """The lemon's Slurm node undrained and its Kubernetes node without a cordon."""
    node = json.loads(cluster.kubectl("get", "node", cluster.kube_node_of(LEMON), "-o", "json"))
    return "DRAIN" not in cluster.slurm_node(LEMON)["State"] and not node["spec"].get("unschedulable")


def leave_as_found(cluster: sl.SlinkyCluster, account: str) -> None:
    """The test's jobs cancelled, a cordon of ours lifted, the Slurm node back in service (a failed
    test must not leave the next one a drained node)."""
    cluster.run("scancel", f"--account={account}")
    kube_node = cluster.kube_node_of(LEMON)
    if slinky.is_ours(json.loads(cluster.kubectl("get", "node", kube_node, "-o", "json"))):
        cluster.kubectl("patch", "node", kube_node, "--type=merge", "-p", json.dumps(slinky.uncordon_patch(None)))
    cluster.wait(f"{LEMON} back in service", lambda: in_service(cluster))


async def lemon_advice(cluster: sl.SlinkyCluster, store: Any, account: str, workdir: Path) -> dict[str, Any]:
    """Two Xid jobs on the same Slurm node: the second one's advice names it a lemon."""
    job = ""
    for n in (1, 2):
        out = await asyncio.to_thread(
            cluster.run, "sbatch", "--parsable", "--comment=trainguard max-retries=0", f"--account={account}",
            f"--nodelist={LEMON}", "--nodes=1", f"--output={workdir}/slurm-%j.out", f"{workdir}/xid.sh")
        job = out.strip().split(";")[0]

        async def advised(job: str = job) -> bool:
            return bool([r for r in await store.audit_records(kind=vocab.AuditKind.ADVICE)
                         if r.workload.endswith(f"/{job}")])
        await until(advised, f"the advice of Xid job {n} ({job})")
    [item] = [r for r in await store.audit_records(kind=vocab.AuditKind.ADVICE) if r.workload.endswith(f"/{job}")]
    assert item.payload["drain_nodes"] == [LEMON], item.payload["reasons"]
    return dict(item.payload)


async def rows(store: Any, operation: actions.Operation) -> list[actions.ActionRecord]:
    return [r for r in await store.actions_by_operation([operation]) if r.args.get("node") == LEMON]


async def done(store: Any, operation: actions.Operation) -> bool:
    return any(r.status is actions.ActionStatus.DONE for r in await rows(store, operation))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "jobs"
    path.mkdir()
    path.chmod(0o777)
    (path / "xid.sh").write_text(f"#!/bin/bash\n{XID}\n")
    return path


async def test_the_executors_cordon_is_drained_by_slurm_operator_and_lifted_after_undrain_after(
        slinky_cluster: sl.SlinkyCluster, tmp_path: Path, workdir: Path) -> None:
    account = f"slinky-{secrets.token_hex(3)}"
    kube_node = slinky_cluster.kube_node_of(LEMON)

    async def slurm_state() -> dict[str, str]:
        return await asyncio.to_thread(slinky_cluster.slurm_node, LEMON)

    async with running_engine(slinky_cluster, tmp_path, account, allow_action=True) as store:
        item = await lemon_advice(slinky_cluster, store, account, workdir)
        assert item["mode"] == "Action" and item["drain_in_scheduler"], item["reasons"]
        await until(lambda: done(store, actions.Operation.DRAIN_NODE), "the executor's drain step (a cordon)")
        [step] = await rows(store, actions.Operation.DRAIN_NODE)
        trail = [(r.payload.get("step"), r.payload.get("status")) for r in await store.audit_records(
            workload=step.workload, kind=vocab.AuditKind.ACTION)]
        assert trail.index((step.step, "intent")) < trail.index((step.step, "done")), trail
        annotation = slinky_cluster.kubectl("get", "node", kube_node, "-o", ANNOTATION_PATH)
        assert annotation.startswith("trainguard:") and f"Slurm node {LEMON}" in annotation

        async def drained_by_slurm_operator() -> bool:
            state = await slurm_state()
            return "DRAIN" in state.get("State", "") and state.get("Reason", "").startswith(
                f"slurm-operator: {annotation}")
        await until(drained_by_slurm_operator, f"slurm-operator to drain {LEMON} with our reason")

        await until(lambda: done(store, actions.Operation.RESUME_NODE),
                    f"the uncordon after undrainAfter ({UNDRAIN_AFTER_S} s)")

        async def back_in_service() -> bool:
            return "DRAIN" not in (await slurm_state()).get("State", "")
        await until(back_in_service, f"slurm-operator to return {LEMON} to service")
    unschedulable = slinky_cluster.kubectl("get", "node", kube_node, "-o", "jsonpath={.spec.unschedulable}")
    assert unschedulable.strip() in ("", "false")


async def test_with_the_switch_off_slurm_operator_is_never_asked_to_drain(
        slinky_cluster: sl.SlinkyCluster, tmp_path: Path, workdir: Path) -> None:
    account = f"slinky-{secrets.token_hex(3)}"
    kube_node = slinky_cluster.kube_node_of(LEMON)
    async with running_engine(slinky_cluster, tmp_path, account, allow_action=False) as store:
        item = await lemon_advice(slinky_cluster, store, account, workdir)
        assert item["mode"] == "Monitor", item
        assert not await done(store, actions.Operation.DRAIN_NODE)
    unschedulable = slinky_cluster.kubectl("get", "node", kube_node, "-o", "jsonpath={.spec.unschedulable}")
    assert unschedulable.strip() in ("", "false")
    assert "DRAIN" not in slinky_cluster.slurm_node(LEMON)["State"]
    assert slinky.CORDON_REASON_ANNOTATION not in slinky_cluster.kubectl("get", "node", kube_node, "-o", "json")
