"""What the end-to-end tests on the simulated cluster share: our CRDs and a policy installed, the
operator run in-process on an audit database of its own, waiting for a workload's recovery to be
recorded, and the shared fake nodes left as they were found.

The operator's own shell is exercised as in production (``operator.run``); only the process
boundary is skipped (``test_operator_killed.py`` runs it as a subprocess to kill it)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.kube_cluster import JOBSET_NAME_LABEL, JOBSET_RESTART_LABEL, NODES, SimCluster
from trainguard import settings as settings_mod
from trainguard.k8s import operator
from trainguard.k8s.kubejobs import nodes
from trainguard.model import vocab
from trainguard.store import audit, database

REPO = Path(__file__).resolve().parents[3]
WAIT_S = 180.0
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus."
POLICY = """apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {{name: gpu, namespace: {ns}}}
spec:
  mode: {mode}
  detection: {{settle: 1s, hangTimeout: 600s}}
"""


async def until(what: str, probe: Any, within_s: float = WAIT_S) -> Any:
    """The first truthy result of ``probe`` (run off the loop: it calls kubectl), polled twice a second."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        found = await asyncio.to_thread(probe)
        if found:
            return found
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.5)


async def printed_and_read(sim: Any, ns: str, pod: str, lines: list[str], db: Path, workload: str) -> None:
    """``lines`` printed by ``pod`` and read by the operator before anything else happens to the pod.

    A process prints its Xid and then dies; the pod's failure, and the training-operator's or the
    JobSet controller's restart after it, come later. Failing the pod at once lets the restart
    overtake our read on a loaded machine, and the line is then charged to the next attempt (a
    known race of pod-log lines read after their attempt was replaced: the closing note of the stop
    that added this; a product fix charges a line by the pod that printed it)."""
    before = lines_read(db, workload)
    sim.write_pod_log(ns, pod, lines)
    await until(f"{len(lines)} line(s) of {pod} read", lambda: lines_read(db, workload) > before)


def lines_read(db: Path, workload: str) -> int:
    """Lines of the workload the engine has handed to detection and saved its place after (its tail
    positions in the audit store)."""
    if not db.exists():
        return 0
    with contextlib.closing(sqlite3.connect(db, timeout=5)) as connection:
        try:
            row = connection.execute("SELECT max(lineno) FROM tail_positions WHERE workload = ?",
                                     (workload,)).fetchone()
        except sqlite3.OperationalError:  # the schema is not there yet
            return 0
    return int(row[0] or 0)


def pods_of(sim: SimCluster, ns: str, name: str) -> list[dict[str, Any]]:
    return [p for p in sim.pods(ns, f"{JOBSET_NAME_LABEL}={name}") if not p["metadata"].get("deletionTimestamp")]


def running(sim: SimCluster, ns: str, name: str, attempt: int) -> list[dict[str, Any]] | None:
    """The JobSet's 4 pods of ``attempt``, once all of them run."""
    pods = [p for p in pods_of(sim, ns, name) if p["metadata"]["labels"].get(JOBSET_RESTART_LABEL) == str(attempt)]
    if len(pods) == 4 and all(p.get("status", {}).get("phase") == "Running" for p in pods):
        return pods
    return None


def restarted(sim: SimCluster, ns: str, name: str) -> list[dict[str, Any]] | None:
    """The JobSet's pods of its latest restart, once it restarted at least once and all 4 run."""
    current = sim.get("jobset", name, ns) or {}
    attempt = int((current.get("status") or {}).get("restarts") or 0)
    return running(sim, ns, name, attempt) if attempt >= 1 else None


def completed(sim: SimCluster, ns: str, name: str) -> bool:
    return ((sim.get("jobset", name, ns) or {}).get("status") or {}).get("terminalState") == "Completed"


def install(sim: SimCluster, policy: str) -> None:
    """Our CRDs (established) and one RecoveryPolicy."""
    sim.kubectl("apply", "-k", str(REPO / "crds"))
    sim.kubectl("wait", "--for=condition=Established", "crd/recoverypolicies.trainguard.dev", "--timeout=60s")
    sim.apply(policy)


def lift_our_exclusions(sim: SimCluster, names: tuple[str, ...] = NODES) -> None:
    """Leave the shared nodes (the fake ones unless ``names`` says which) as we found them: lift every
    exclusion of ours. The lift patch
    carries the node's resourceVersion (as the product's does), and the node controller may change
    the node in between (a NotReady node's taints): a conflict reads the node again and retries, so a
    test never leaves its exclusion to the next one sharing the cluster."""
    for name in names:
        for _ in range(20):
            obj = sim.get("node", name) or {}
            if nodes.exclusion_of(obj) is None:
                break
            try:
                sim.kubectl("patch", "node", name, "--type=merge", "-p", json.dumps(nodes.lift_patch(obj)))
            except RuntimeError as exc:
                if "Conflict" not in str(exc):
                    raise
                time.sleep(0.2)
                continue
            break
        else:
            raise AssertionError(f"could not lift our exclusion of {name}: 20 conflicts in a row")


@dataclass
class Recorded:
    """A workload's audit trail once its first recovery has an outcome."""

    records: list[audit.AuditRecord]

    @property
    def trail(self) -> list[tuple[str, Any]]:
        """Every record as (kind, payload): the message of a failed assertion."""
        return [(r.kind.value, r.payload) for r in self.records]

    def one(self, kind: vocab.AuditKind) -> audit.AuditRecord:
        found = [r for r in self.records if r.kind == kind]
        assert len(found) == 1, (kind, self.trail)
        return found[0]


@dataclass
class InProcessOperator:
    """``trainguard operator --scheduler kubernetes`` running in this test's event loop."""

    db: Path
    task: asyncio.Task[None]

    @property
    def db_url(self) -> str:
        return f"sqlite+aiosqlite:///{self.db}"

    async def recovery(self, workload: str) -> Recorded:
        """The workload's trail once an outcome is recorded (the operator must stay up meanwhile)."""
        store = await database.open_store(self.db_url)
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT_S
            while not await store.audit_records(workload=workload, kind=vocab.AuditKind.OUTCOME):
                assert not self.task.done(), "the operator stopped"
                assert loop.time() < deadline, "no outcome recorded"
                await asyncio.sleep(0.5)
            return Recorded(await store.audit_records(workload=workload))
        finally:
            await store.close()


@contextlib.asynccontextmanager
async def operator_running(sim: SimCluster, ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *,
                           lift: bool = True) -> AsyncIterator[InProcessOperator]:
    """The operator watching ``ns`` with both keys to act (a policy's mode still decides), stopped
    on exit; then every exclusion of ours is lifted from the shared fake nodes (``lift=False``: an
    operator that another one on the same audit database follows)."""
    monkeypatch.setenv("KUBECONFIG", str(sim.kubeconfig))
    db = tmp_path / "audit.db"
    config = operator.OperatorConfig(
        scheduler="kubernetes", namespaces=(ns,), workload_namespace=ns,
        engine=settings_mod.EngineSettings(allow_action=True, discovery_interval_s=0.5),
        db_url=f"sqlite+aiosqlite:///{db}", status_interval_s=0.5)
    stop = asyncio.Event()
    task = asyncio.create_task(operator.run(config, stop_flag=stop))
    try:
        yield InProcessOperator(db, task)
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        if lift:
            lift_our_exclusions(sim)
