"""Benchmark: several engine replicas sharing one audit database with ``--shards`` (issue 28, goal 3).

``--replicas R`` processes each run the real ``Engine`` (Monitor mode, the built-in catalog) with
the real shard leases in the shared store (``shards.StoreLeases``, ``--shards S`` keyed by
partition), over the same ``--workloads N`` opted-in RUNNING jobs of the engine tests'
``FakeScheduler`` (each replica holds the same listing in memory, as each would list the same
cluster; 64 partitions) and their real output files. ``scale.py``'s writer process appends one
progress line per workload per second and writes an Xid 79 line into ``--crashes`` of them, spread
over the run after a warm-up. At ``--kill-at`` (a fraction of the run) replica 0 is killed with
SIGKILL; the others must take its shards over once their leases expire (``lease_duration_s`` of
the replica that saw the record unchanged) and judge the crashes of those shards from the shared
store's positions: none lost, none judged twice.

Each replica reports every half second which shards it holds and how many workloads it tracks,
and every anomaly it records (``replica-K.jsonl`` in the run's folder). It prints one JSON object:

- ``replicas``, ``shards``, ``workloads``, ``db``, ``commit``, ``dirty``;
- ``tracked_after_s``: the start -> the replicas together track every workload (before the kill);
- ``detect_p50_s`` / ``detect_p99_s`` over the crashes written while every shard had a live
  holder, ``detect_missed`` (crashes never turned into an anomaly), ``detect_doubled`` (crashes with
  an anomaly from more than one replica, or more than one anomaly row in the store);
- ``handover_s``: the kill -> every shard held by a live replica again; ``lease_duration_s``;
  ``after_kill``: the crashes of the killed replica's shards written after the kill, and their
  latency (it includes the hand-over: the lease must expire before anyone may take the shard);
- ``slowest``: the five slowest crashes (shard, when written, latency, which replica recorded it);
- ``overlap`` (workloads tracked by two live replicas at the end) and ``untracked`` (by none);
- ``per_replica``: each one's shards at the end, workloads tracked, CPU cores (its CPU seconds per
  wall second), peak RSS; ``goals`` and ``missed_goals``.

    hack/local-postgres.sh up && source .local/postgres/env
    .venv/bin/python benchmarks/shards.py --replicas 4 --workloads 4000 --minutes 3 --db postgres

``--db postgres`` makes a fresh database next to ``$TG_PG_URL``'s for the run (and drops it after),
so no lease of an earlier run is met; ``--db sqlite`` (default) a fresh file all replicas share.
Exit 0 when every goal is met, 1 when one is missed (each on stderr), 2 on a setup error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import scale  # noqa: E402

from tests.support import fake_scheduler  # noqa: E402
from trainguard import engine as engine_mod  # noqa: E402
from trainguard import settings as settings_mod  # noqa: E402
from trainguard import shards as shards_mod  # noqa: E402
from trainguard.detect import catalog as catalog_mod  # noqa: E402
from trainguard.model import clock, vocab, workloads  # noqa: E402
from trainguard.policy import loader  # noqa: E402
from trainguard.store import database  # noqa: E402

PARTITIONS = 64
REPORT_S = 0.5
GOALS = {"tracked_after_s": 30.0, "detect_p50_s": 1.0, "detect_p99_s": 2.0, "detect_missed": 0,
         "detect_doubled": 0, "overlap": 0, "untracked": 0}
"""Issue 28, goal 3 (each replica within goal 1; nothing tracked twice or never; nothing lost or
doubled). ``handover_s`` is checked against the lease timing separately (``handover_goal``)."""


# ---------------------------------------------------------------------------------------- replica


async def replica(args: argparse.Namespace) -> None:
    """One replica: the engine over its shards, reporting to ``replica-K.jsonl`` until the run ends."""
    folder: Path = args.folder
    jobs = json.loads((folder / "jobs.json").read_text())
    started = time.time()
    scheduler = fake_scheduler.FakeScheduler(nodes=[f"node{i}" for i in range(scale.NODES)])
    for job in jobs:
        scheduler.jobs[job["job_id"]] = workloads.JobSnapshot(
            workload=job["workload"], job_id=job["job_id"], name=f"train-{job['job_id']}",
            state=workloads.JobState.RUNNING, partition=job["partition"], comment="trainguard policy=bench",
            nodes=[f"node{int(job['job_id']) % scale.NODES}"], stdout_path=job["path"], started_at=started)
    store = await database.open_store(args.url)
    spec = shards_mod.ShardSpec(args.shards, "partition", f"replica-{args.replica}")
    ownership = shards_mod.Ownership(spec, shards_mod.StoreLeases(store, spec, clock.SystemClock()))
    out = (folder / f"replica-{args.replica}.jsonl").open("a", encoding="utf-8")

    def emit(item: dict[str, Any]) -> None:
        out.write(json.dumps(item) + "\n")
        out.flush()  # a killed replica's reports up to its end are kept

    async def listener(kind: str, workload: str, payload: dict[str, object]) -> None:
        if kind == vocab.AuditKind.ANOMALY:
            emit({"anomaly": workload, "t": time.time()})

    engine = engine_mod.Engine(
        scheduler, store, loader.parse_text(scale.POLICY, "benchmark policy"), catalog_mod.load_catalog(),
        clock_=clock.SystemClock(), settings=settings_mod.EngineSettings(), listeners=[listener], shards=ownership)
    stop = asyncio.Event()
    task = asyncio.create_task(engine.run(stop))
    cpu0 = scale._cpu_s()
    end = args.end  # the same moment in every replica: their last reports compare one instant
    while time.time() < end and not task.done():
        await asyncio.sleep(REPORT_S)
        emit({"t": time.time(), "held": sorted(ownership.leases.held()),
              "tracked": sum(1 for rt in engine.runtimes.values() if rt.ready)})
    emit({"final": sorted(name for name, rt in engine.runtimes.items() if rt.ready), "t": time.time(),
          "held": sorted(ownership.leases.held()),
          "cpu_cores": round((scale._cpu_s() - cpu0) / max(time.time() - started, 1e-9), 3),
          "rss_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)})
    stop.set()
    await asyncio.wait_for(task, timeout=120)
    await store.close()
    out.close()


# ---------------------------------------------------------------------------------------- controller


async def fresh_database(kind: str, folder: Path, run_id: str) -> tuple[str, str | None]:
    """The run's own database URL, and the admin URL to drop it with (None: a file)."""
    if "://" in kind:
        return kind, None
    if kind == "sqlite":
        return f"sqlite+aiosqlite:///{folder / 'audit.db'}", None
    if kind != "postgres":
        raise SystemExit(f"--db {kind}: give sqlite, postgres or a database URL")
    admin = os.environ.get("TG_PG_URL")
    if not admin:
        raise SystemExit("--db postgres needs TG_PG_URL (hack/local-postgres.sh up; source .local/postgres/env)")
    name = f"tg_shards_{run_id}"
    engine = create_async_engine(admin, isolation_level="AUTOCOMMIT")
    async with engine.connect() as conn:
        await conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    await engine.dispose()
    return str(sa.make_url(admin).set(database=name)), admin


async def drop_database(url: str, admin: str | None) -> None:
    if admin is None:
        return
    engine = create_async_engine(admin, isolation_level="AUTOCOMMIT")
    async with engine.connect() as conn:
        await conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{sa.make_url(url).database}" WITH (FORCE)'))
    await engine.dispose()


async def anomaly_rows(url: str, prefix: str) -> dict[str, int]:
    """Anomaly rows per workload of this run in the shared store."""
    engine = create_async_engine(url)
    async with engine.connect() as conn:
        rows = await conn.execute(sa.text("SELECT workload, count(*) FROM audit_log WHERE kind = :kind "
                                          "AND workload LIKE :prefix GROUP BY workload"),
                                  {"kind": vocab.AuditKind.ANOMALY.value, "prefix": prefix + "%"})
        counts = {str(w): int(n) for w, n in rows}
    await engine.dispose()
    return counts


def read_reports(folder: Path, replicas: int) -> list[list[dict[str, Any]]]:
    reports = []
    for k in range(replicas):
        path = folder / f"replica-{k}.jsonl"
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        reports.append([json.loads(line) for line in lines if line.strip().endswith("}")])
    return reports


def controller(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    run_id = f"{os.getpid()}_{int(time.time())}"
    url, admin = asyncio.run(fresh_database(args.db, folder, run_id))
    asyncio.run(migrate(url))  # once, before the replicas race to
    prefix = f"slurm/shards-{run_id}/"
    jobs = [{"workload": f"{prefix}{i}", "job_id": str(i), "partition": f"p{i % PARTITIONS}",
             "path": str(folder / f"{i}.out")} for i in range(args.workloads)]
    for job in jobs:
        Path(job["path"]).touch()
    (folder / "jobs.json").write_text(json.dumps(jobs))
    seconds = args.minutes * 60.0
    rng = random.Random(args.seed)
    sample = rng.sample(range(args.workloads), min(args.crashes, args.workloads))
    warm = min(seconds / 3, 60.0)
    crashes = [(warm + (seconds - warm - 5.0) * (k + 0.5) / len(sample), index) for k, index in enumerate(sample)]
    (folder / "crashes.json").write_text(json.dumps(crashes))
    (folder / "writer.jsonl").touch()
    t0 = time.time()
    end = t0 + seconds + 10.0  # the last crash's window; the replicas' starts may lag (imports)
    procs = [subprocess.Popen([sys.executable, __file__, "--replica", str(k), "--folder", str(folder), "--url", url,
                               "--shards", str(args.shards), "--end", str(end)])
             for k in range(args.replicas)]
    writer = subprocess.Popen([sys.executable, str(Path(scale.__file__)), "--writer", str(folder),
                               "--workloads", str(args.workloads), "--minutes", str(args.minutes)])
    kill_at = t0 + seconds * args.kill_at
    killed_at: float | None = None
    try:
        while any(p.poll() is None for p in procs):
            if killed_at is None and time.time() >= kill_at and args.kill_at < 1:
                procs[0].send_signal(signal.SIGKILL)
                killed_at = time.time()
            time.sleep(0.2)
        writer.wait(timeout=120)
    finally:
        for p in (*procs, writer):
            if p.poll() is None:
                p.kill()
    reports = read_reports(folder, args.replicas)
    rows = asyncio.run(anomaly_rows(url, prefix))
    asyncio.run(drop_database(url, admin))
    return summarize(args, jobs, reports, rows=rows, folder=folder, t0=t0, killed_at=killed_at)


async def migrate(url: str) -> None:
    store = await database.open_store(url)
    await store.close()


def summarize(args: argparse.Namespace, jobs: list[dict[str, Any]], reports: list[list[dict[str, Any]]], *,
              rows: dict[str, int], folder: Path, t0: float, killed_at: float | None) -> dict[str, Any]:
    """The figures of the run from the replicas' reports, the writer's and the store's anomaly rows."""
    names = [job["workload"] for job in jobs]
    shard_of = {job["workload"]: shards_mod.shard_index(job["partition"], args.shards) for job in jobs}
    written_at: dict[str, float] = {}
    for line in (folder / "writer.jsonl").read_text().splitlines():
        item = json.loads(line)
        if "crash" in item:
            written_at[names[item["crash"]]] = item["at"]
    seen: dict[str, list[tuple[int, float]]] = {}
    for k, report in enumerate(reports):
        for item in report:
            if "anomaly" in item:
                seen.setdefault(item["anomaly"], []).append((k, item["t"]))
    # The timeline: every report of every replica in time order; the latest one of each replica counts.
    timeline = sorted(((item["t"], k, item) for k, report in enumerate(reports) for item in report if "held" in item),
                      key=lambda x: x[0])
    latest: dict[int, dict[str, Any]] = {}
    tracked_after = handover = None
    killed_shards: set[int] = set()
    for t, k, item in timeline:
        if killed_at is not None and t > killed_at and k == 0:
            continue
        latest[k] = item
        live = {r: i for r, i in latest.items() if killed_at is None or t <= killed_at or r != 0}
        if tracked_after is None and (killed_at is None or t <= killed_at) and \
                sum(i.get("tracked", len(i.get("final", []))) for i in live.values()) >= len(names):
            tracked_after = t - t0
        if killed_at is not None and t <= killed_at and k == 0:
            killed_shards = set(item["held"])
        if killed_at is not None and t > killed_at and handover is None:
            held = set().union(*(set(i["held"]) for i in live.values()))
            if held >= set(range(args.shards)):
                handover = t - killed_at
    lease = shards_mod.Timing()
    uncovered_until = killed_at + handover if killed_at is not None and handover is not None else None

    def orphaned(w: str) -> bool:
        return (killed_at is not None and shard_of[w] in killed_shards and written_at[w] >= killed_at - 2.0
                and (uncovered_until is None or written_at[w] <= uncovered_until + 2.0))

    normal = [min(t for _, t in seen[w]) - at for w, at in written_at.items() if w in seen and not orphaned(w)]
    after = [min(t for _, t in seen[w]) - at for w, at in written_at.items() if w in seen and orphaned(w)]
    latency = {w: min(t for _, t in seen[w]) - at for w, at in written_at.items() if w in seen}
    slowest = sorted(((lat, w) for w, lat in latency.items()), reverse=True)[:5]
    doubled = sorted(w for w in written_at if len({k for k, _ in seen.get(w, [])}) > 1 or rows.get(w, 0) > 1)
    finals = {k: set(item["final"]) for k, report in enumerate(reports) for item in report if "final" in item}
    live_finals = [s for k, s in finals.items() if k != 0 or killed_at is None]
    everyone = [w for s in live_finals for w in s]
    per_replica = []
    for k, report in enumerate(reports):
        final = next((i for i in report if "final" in i), None)
        per_replica.append({"replica": k, "killed": k == 0 and killed_at is not None,
                            "shards": final["held"] if final else (report[-1]["held"] if report else []),
                            "tracked": len(final["final"]) if final else None,
                            "cpu_cores": final["cpu_cores"] if final else None,
                            "rss_peak_mb": final["rss_peak_mb"] if final else None})
    return {
        **scale.code_commit(),
        "replicas": args.replicas, "shards": args.shards, "workloads": args.workloads, "minutes": args.minutes,
        "db": args.db if "://" not in args.db else database.safe_url(args.db),
        "tracked_after_s": round(tracked_after, 2) if tracked_after is not None else None,
        "crashes": len(written_at),
        "detect_p50_s": scale._quantile(normal, 0.5), "detect_p99_s": scale._quantile(normal, 0.99),
        "detect_max_s": round(max(normal), 3) if normal else None,
        "detect_missed": sum(1 for w in written_at if w not in seen and rows.get(w, 0) == 0),
        "detect_doubled": len(doubled), "doubled": doubled[:10],
        "slowest": [{"workload": w, "shard": shard_of[w], "written_at_s": round(written_at[w] - t0, 2),
                     "latency_s": round(lat, 3), "recorded_by": sorted({k for k, _ in seen[w]})} for lat, w in slowest],
        "killed_at_s": round(killed_at - t0, 2) if killed_at is not None else None,
        "killed_shards": sorted(killed_shards),
        "handover_s": round(handover, 2) if handover is not None else None,
        "lease_duration_s": lease.lease_duration_s, "renew_interval_s": lease.renew_interval_s,
        "after_kill": {"crashes": sum(1 for w in written_at if orphaned(w)),
                       "detected": len(after), "p50_s": scale._quantile(after, 0.5),
                       "max_s": round(max(after), 3) if after else None},
        "overlap": len(everyone) - len(set(everyone)),
        "untracked": len(set(names) - set(everyone)),
        "per_replica": per_replica,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def missed_goals(result: dict[str, Any]) -> list[str]:
    """Each goal the result misses, and by how much."""
    missed: list[str] = []
    for key, limit in GOALS.items():
        value = result.get(key)
        if value is None:
            missed.append(f"{key}: never (goal <= {limit})")
        elif value > limit:
            missed.append(f"{key}: {value} > {limit}")
    if result["killed_at_s"] is not None:
        bound = result["lease_duration_s"] + result["renew_interval_s"]
        handover = result["handover_s"]
        if handover is None or handover > bound:
            missed.append(f"handover_s: {handover} > {bound} (one lease period, plus the renew interval in "
                          "which a candidate notices the expiry)")
        if result["after_kill"]["detected"] < result["after_kill"]["crashes"]:
            missed.append(f"after_kill: {result['after_kill']['detected']} of {result['after_kill']['crashes']} "
                          "crashes of the killed replica's shards detected")
    return missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--shards", type=int, default=None, help="default: as many as replicas")
    parser.add_argument("--workloads", type=int, default=4000)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--crashes", type=int, default=40)
    parser.add_argument("--kill-at", type=float, default=0.5,
                        help="when to kill replica 0, as a fraction of the run (1: never)")
    parser.add_argument("--db", default="sqlite", help="sqlite (default), postgres ($TG_PG_URL) or a database URL")
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--replica", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--url", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--end", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.shards = args.shards or args.replicas
    if args.replica is not None:
        asyncio.run(replica(args))
        return 0
    import logging
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="tg-shards-", dir=args.workdir) as tmp:
        try:
            result = controller(args, Path(tmp))
        except (database.StoreError, OSError) as exc:
            print(f"shards: {exc}", file=sys.stderr)
            return 2
    result["goals"] = GOALS
    return scale.report("shards", result, missed_goals(result))


if __name__ == "__main__":
    sys.exit(main())
