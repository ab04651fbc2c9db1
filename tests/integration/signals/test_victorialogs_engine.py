"""The engine with VictoriaLogs as its log source: a restarted engine resumes where detection stopped.

Real VictoriaLogs server, real SQLite audit store, the product's engine with ``log_books`` from
``signals.victorialogs.books``; the scheduler is the engine tests' fake (the job's state is not
what is under test here, the reading of its output is). Engine A reads an Xid line and records
the anomaly (positions stored with the advice); engine B, started on the same store as after a
crash, must not read the Xid line again (no second anomaly), and reads the lines after it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.integration.signals.test_victorialogs import push
from tests.support import fake_scheduler
from tests.support.victorialogs import VictoriaLogsServer
from trainguard import engine as engine_mod
from trainguard import settings as settings_mod
from trainguard.detect import catalog as catalog_mod
from trainguard.model import clock, vocab, workloads
from trainguard.policy import loader
from trainguard.signals import victorialogs as vl
from trainguard.store import audit, database

pytestmark = [pytest.mark.integration, pytest.mark.victorialogs]

POLICY = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: watch}
spec:
  mode: Monitor
  detection: {settle: 1s, hangTimeout: 600s}
"""
OUT = "/shared/jobs/slurm-42.out"
XID = "1: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."
WAIT_S = 120.0


def make_engine(url: str, scheduler: fake_scheduler.FakeScheduler, store: audit.AuditStore,
                catalog: catalog_mod.Catalog) -> tuple[engine_mod.Engine, vl.Client]:
    books, client = vl.books(vl.Config(url=url, sweep_s=0.5))
    engine = engine_mod.Engine(scheduler, store, loader.parse_text(POLICY, "test"), catalog,
                               clock_=clock.SystemClock(), settings=settings_mod.EngineSettings(), log_books=books)
    return engine, client


async def rounds_until(engine: engine_mod.Engine, done: object) -> None:
    deadline = time.monotonic() + WAIT_S
    while not callable(done) or not await done():  # type: ignore[misc]
        assert time.monotonic() < deadline, "condition not reached"
        await engine.discover()
        await engine.tail()
        await asyncio.sleep(0.1)


async def stop(engine: engine_mod.Engine, client: vl.Client) -> None:
    for rt in engine.runtimes.values():
        rt.book.close()
        if isinstance(rt.book, vl.VictoriaLogsBook):
            await rt.book.wait_closed()
    await client.close()


async def test_a_restarted_engine_does_not_read_the_decided_lines_again(
        victorialogs: VictoriaLogsServer, tmp_path: Path) -> None:
    catalog = catalog_mod.load_catalog()
    store = await database.open_store(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    job = workloads.JobSnapshot(workload="slurm/test/42", job_id="42", name="train", state=workloads.JobState.RUNNING,
                                nodes=["node1", "node2"], comment="trainguard policy=watch", stdout_path=OUT,
                                started_at=float(int(time.time()) - 5))
    scheduler = fake_scheduler.FakeScheduler([job], nodes=["node1", "node2", "node3"])

    async def anomalies() -> list[audit.AuditRecord]:
        return await store.audit_records(workload=job.workload, kind=vocab.AuditKind.ANOMALY)

    try:
        first, client_a = make_engine(victorialogs.url, scheduler, store, catalog)
        now = time.time_ns()
        await push(victorialogs.url, [(now, "0: iteration 7 loss 1.9"), (now + 1, XID)])

        async def one_anomaly() -> bool:
            return len(await anomalies()) == 1

        await rounds_until(first, one_anomaly)
        [record] = await anomalies()
        assert record.payload["suspect_nodes"] == ["node2"]
        await stop(first, client_a)

        # the restarted process: the Xid is behind the stored position; a new line is not
        second, client_b = make_engine(victorialogs.url, scheduler, store, catalog)
        await push(victorialogs.url, [(time.time_ns(), "0: iteration 8 loss 1.8")])

        async def read_the_new_line() -> bool:
            rt = second.runtimes.get(job.workload)
            return rt is not None and any(f.consumed is not None and f.consumed.lineno >= 3 for f in rt.book.files)

        await rounds_until(second, read_the_new_line)
        rt = second.runtimes[job.workload]
        assert [f.basis for f in rt.book.files] == ["stored"]
        book = rt.book
        assert isinstance(book, vl.VictoriaLogsBook)
        target = book.rounds + 2

        async def two_more_sweeps() -> bool:
            return book.rounds >= target

        await rounds_until(second, two_more_sweeps)
        assert len(await anomalies()) == 1, "the Xid line was read again after the restart"
        assert rt.book.files[0].consumed is not None and rt.book.files[0].consumed.lineno == 3
        await stop(second, client_b)
    finally:
        await store.close()
