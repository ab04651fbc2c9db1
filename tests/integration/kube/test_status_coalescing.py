"""WorkloadRecovery status writes are coalesced (``k8s/coalesce.py``) on the real kube-apiserver.

A real Engine (in-memory FakeScheduler, SQLite audit store) tracks one job; the operator shell's
record listener, reporter and status coalescer run as in ``trainguard operator``. The engine then
reports a burst of records for that one workload; the API server must see far fewer status patches
than records, and the status it ends up with must be exactly the projection of the engine's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client as k8s

from tests.support import fake_scheduler, kube
from trainguard import engine as engine_mod
from trainguard import settings as settings_mod
from trainguard.detect import catalog as catalog_mod
from trainguard.k8s import client, operator, recovery, status
from trainguard.model import clock, vocab, workloads
from trainguard.policy import loader
from trainguard.store import database

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.timeout(300)]

REPO_ROOT = Path(__file__).resolve().parents[3]
POLICY = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: watch}
spec: {mode: Monitor}
"""
CATEGORIES = [vocab.Category.NCCL_TIMEOUT, vocab.Category.SEGFAULT, vocab.Category.OOM_GPU,
              vocab.Category.PYTHON_EXCEPTION]


@pytest.fixture
def namespace(kube_api: kube.LocalKube) -> Iterator[str]:
    done = kube_api.kubectl("apply", "-k", str(REPO_ROOT / "crds"))
    assert done.returncode == 0, done.stderr
    name = kube.unique_name("tg-coalesce")
    assert kube_api.kubectl("create", "namespace", name).returncode == 0
    yield name
    kube_api.kubectl("delete", "namespace", name, "--wait=false")


async def test_a_burst_of_engine_records_for_one_workload_is_written_as_a_few_exact_status_patches(
    kube_api: kube.LocalKube, namespace: str, tmp_path: Path,
) -> None:
    scheduler = fake_scheduler.FakeScheduler(nodes=["node1", "node2"])
    scheduler.jobs["77"] = workloads.JobSnapshot(
        workload="slurm/test/77", job_id="77", name="train", state=workloads.JobState.RUNNING,
        nodes=["node1", "node2"], comment="trainguard policy=watch", stdout_path=str(tmp_path / "77.out"))
    (tmp_path / "77.out").write_text("step 1\n")
    store = await database.open_store(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    shell = operator.Shell(operator.OperatorConfig(scheduler="slurm-local", workload_namespace=namespace))
    shell.api = await client.load_api_client(str(kube_api.kubeconfig))
    shell.store = store
    engine = engine_mod.Engine(scheduler, store, loader.parse_text(POLICY, "test"), catalog_mod.load_catalog(),
                               clock_=clock.SystemClock(), settings=settings_mod.EngineSettings(),
                               listeners=[shell.reporting.on_record])
    shell.engine = engine
    stop = asyncio.Event()
    tasks = [asyncio.ensure_future(shell.reporting.report_forever(stop)),
             asyncio.ensure_future(shell.recoveries.coalescer.run(stop, shell.recoveries.write_status))]
    try:
        await engine.discover()
        rt = engine.runtimes["slurm/test/77"]
        records = 60
        for i in range(records):  # 20 engine updates a second: each would be its own patch without coalescing
            await asyncio.sleep(0.05)
            category = CATEGORIES[i % len(CATEGORIES)]
            await engine.notify(rt, vocab.AuditKind.ANOMALY, {
                "symptom": "crash", "category": category.value, "suspect_nodes": ["node2"],
                "evidence": [{"line": i + 1, "text": f"line {i}", "pattern": f"pattern-{i}"}]})
        name = status.object_name(rt.workload)

        async def stored() -> dict[str, object]:
            assert shell.api is not None
            return dict(await k8s.CustomObjectsApi(shell.api).get_namespaced_custom_object(
                recovery.GROUP, recovery.VERSION, namespace, recovery.PLURAL, name))

        final: dict[str, object] = {}

        async def settled() -> bool:
            nonlocal final
            if not shell.reporting.records.empty() or shell.recoveries.coalescer.pending():
                return False
            final = await stored()
            return not status.differs(status.view_of(rt), final, now=datetime.datetime.now(datetime.UTC))

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 120
        while not await settled():
            assert loop.time() < deadline, ("the status never caught up", shell.recoveries.coalescer.stats)
            await asyncio.sleep(0.2)
        last = final["status"]["lastAnomaly"]  # type: ignore[index]
        assert (last["category"], last["pattern"]) == (CATEGORIES[(records - 1) % len(CATEGORIES)].value,
                                                       f"pattern-{records - 1}")
        recoveries = shell.recoveries
        assert recoveries.stats.patches <= records // 6, (recoveries.stats, recoveries.coalescer.stats)
        assert shell.recoveries.coalescer.stats.marks >= records - 1  # every record was seen, and coalesced
    finally:
        stop.set()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, timeout=30)
        await shell.api.close()
        await store.close()
