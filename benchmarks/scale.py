"""Benchmark: how many concurrent workloads one engine process follows, and how fast it still reacts.

Runs the real ``Engine`` (Monitor mode, the built-in catalog and the default policy) over
``--workloads N`` opted-in RUNNING jobs of the engine tests' ``FakeScheduler`` (our Scheduler
Protocol held in memory: the scheduler is not what is measured here), with the real audit store
(SQLite in a temporary folder, or PostgreSQL with ``--db postgres``) and real output files. A
separate writer process (this script with ``--writer``) appends one progress line per workload
per second, so the engine's CPU time is measured apart from the writing. Into a sample of the
workloads (``--crashes``, spread over the run after a warm-up) the writer writes an Xid 79 line
and then nothing more for that workload, as a crashed job would.

It prints one JSON object:

- ``workloads``; ``tracked`` (workloads tracked at the end) and ``tracked_after_s`` (start of
  the engine -> every workload tracked; null when that never happened);
- ``detect_p50_s`` / ``detect_p99_s``: the crash line written (the writer's clock, just after its
  write) -> the anomaly recorded (the engine's audit listener). This includes the crash
  detector's settle window (the policy's ``detection.settle``, 1 s by default), which collects
  the cascade before concluding; ``detect_missed``: crash lines never turned into an anomaly;
- ``detect_parts``: that latency in three parts (p50 and p99 each): ``read`` (written -> the engine
  read the line: the tailing round's delay), ``settle`` (read -> the detector concluded: the settle
  window plus the wait for the next tick) and ``record`` (concluded -> recorded: the decision and the
  audit write); ``tail_round_s``: the tailing rounds' durations over the second half (count, p50,
  p99, max): with every workload read each round, they set the read delay;
- ``action_p50_s`` / ``action_p99_s``: the anomaly recorded -> the outcome of its advice (in
  Monitor mode the executor records the action it would have issued, ``skipped: monitor mode``);
- ``rss_mb`` (resident memory at the end), ``rss_peak_mb``; ``cpu_cores``: the engine process's
  CPU seconds per wall second over the second half of the run (steady state), and
  ``cpu_cores_all`` over the whole run;
- ``unreadable``: workloads whose output cannot be read (e.g. the descriptor limit), as the
  engine reports them; ``lines_written`` by the writer; ``stuck_warnings``: "reading ... is
  stuck" warnings the engine logged (none is expected: every file here is a local, healthy one);
- ``round_trips``: statements sent to the database (one per execute, one per executemany) and
  commits, in all and per workload per minute over the second half of the run (steady state),
  and the statements per workload until all were tracked;
- ``commit``, ``dirty``: the git commit of the ``trainguard`` package that ran (``PYTHONPATH`` may
  point at another tree's ``operator/``) and whether its tree had uncommitted changes;
- ``goals`` and ``missed_goals``: each goal of issue 28 with its measured value, and for each one
  missed by how much.

    .venv/bin/python benchmarks/scale.py --workloads 1000 --minutes 1
    .venv/bin/python benchmarks/scale.py --workloads 10000 --minutes 10 --db postgres

With ``--db postgres`` the database is ``$TG_PG_URL`` (after ``hack/local-postgres.sh up``,
``source .local/postgres/env``), with ``--db mysql`` ``$TG_MYSQL_URL`` (``hack/local-mysql.sh up``,
``source .local/mysql/env``); workload names carry a run id, so earlier runs' rows do not mix in.
``--db`` also takes a database URL. Exit 0 when every goal is met, 1 when one is missed (each
one on stderr with by how much), 2 on a setup error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import trainguard  # noqa: E402
from tests.support import fake_scheduler  # noqa: E402  (the repository root must be importable first)
from trainguard import engine as engine_mod  # noqa: E402
from trainguard import settings as settings_mod  # noqa: E402
from trainguard.detect import catalog as catalog_mod  # noqa: E402
from trainguard.model import clock, vocab, workloads  # noqa: E402
from trainguard.policy import loader  # noqa: E402
from trainguard.store import database  # noqa: E402

POLICY = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: bench}
spec:
  mode: Monitor
"""
"""The default policy (Monitor mode, 1 s settle window), under a name of this benchmark."""

XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."
"""The injected crash line: a kernel Xid as the training process's output shows it."""
NODES = 64

GOALS = {
    "tracked_after_s": 30.0,
    "detect_p50_s": 1.0,
    "detect_p99_s": 2.0,
    "cpu_cores": 1.0,
    "rss_peak_mb": 1024.0,
    "detect_missed": 0,
    "stuck_warnings": 0,
}
"""Issue 28, goal 1: the most each figure may be (all tracked within 30 s of appearing, crash line
-> anomaly p50 1 s and p99 2 s, at most one core and 1 GiB, nothing missed, no false "stuck")."""


def _progress(step: int) -> str:
    return f"[rank0]: step {step} | loss 2.{step % 97:02d} | 1{step % 7}00.0 samples/s\n"


# ---------------------------------------------------------------------------------------- writer


def writer(folder: Path, count: int, seconds: float, crashes: list[tuple[float, int]], report: Path) -> None:
    """Append one progress line per workload per second for ``seconds``; at each ``(offset, index)``
    write the crash line into workload ``index`` and stop writing it. Each crash's write time goes
    to ``report`` (one JSON line) as soon as it is written."""
    start = time.time()
    pending = sorted(crashes)
    dead: set[int] = set()
    step = 0
    written = 0
    with report.open("a", encoding="utf-8") as out:
        while time.time() - start < seconds:
            tick = start + step
            for index in range(count):
                if index in dead:
                    continue
                with (folder / f"{index}.out").open("a", encoding="utf-8") as handle:
                    handle.write(_progress(step))
                written += 1
            while pending and time.time() - start >= pending[0][0]:
                _, index = pending.pop(0)
                with (folder / f"{index}.out").open("a", encoding="utf-8") as handle:
                    handle.write(XID_79 + "\n")
                dead.add(index)
                out.write(json.dumps({"crash": index, "at": time.time()}) + "\n")
                out.flush()
            step += 1
            delay = tick + 1.0 - time.time()
            if delay > 0:
                time.sleep(delay)
        out.write(json.dumps({"lines_written": written}) + "\n")


# ---------------------------------------------------------------------------------------- engine


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 3)
    return round(statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1], 3)


def code_commit() -> dict[str, Any]:
    """The commit of the ``trainguard`` package this process imported, and whether its tree is dirty."""
    where = Path(trainguard.__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True, timeout=30).stdout.strip()
        status = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no", "--", "."],
                                capture_output=True, text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None, "code": str(where)}
    return {"commit": commit, "dirty": bool(status.strip()), "code": str(where.parents[1])}


class RoundTrips:
    """Counts what the store sends to the database: statements (an executemany is one) and commits."""

    def __init__(self, engine: Any) -> None:
        self.statements = 0
        self.commits = 0
        sa.event.listen(engine.sync_engine, "before_cursor_execute", self._statement)
        sa.event.listen(engine.sync_engine, "commit", self._commit)

    def _statement(self, *_args: Any) -> None:
        self.statements += 1

    def _commit(self, *_args: Any) -> None:
        self.commits += 1


class StuckWarnings(logging.Handler):
    """Counts the engine's "reading ... is stuck" warnings (false ones: every file here is healthy)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "stuck" in record.getMessage():
            self.count += 1


def missed_goals(result: dict[str, Any]) -> list[str]:
    """Each goal of ``GOALS`` the result misses, and by how much."""
    missed = []
    for key, limit in GOALS.items():
        value = result.get(key)
        if value is None:
            if key == "tracked_after_s":
                missed.append(f"tracked_after_s: never ({result['tracked']} of {result['workloads']} tracked "
                              f"after {result['minutes']} min; goal <= {limit} s)")
            elif key.startswith("detect_p"):
                missed.append(f"{key}: no crash detected (goal <= {limit} s)")
            continue
        if value > limit:
            over = f"{value - limit:.3g} over" if limit else f"{value}, goal 0"
            factor = f", {value / limit:.1f}x" if limit else ""
            missed.append(f"{key}: {value} > {limit} ({over}{factor})")
    return missed


async def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    run_id = f"{os.getpid()}-{int(time.time())}"
    if "://" in args.db:
        url = args.db
    elif args.db == "postgres":
        url = os.environ.get("TG_PG_URL")
        if not url:
            raise SystemExit("--db postgres needs TG_PG_URL (hack/local-postgres.sh up; source .local/postgres/env)")
    elif args.db == "mysql":
        url = os.environ.get("TG_MYSQL_URL")
        if not url:
            raise SystemExit("--db mysql needs TG_MYSQL_URL (hack/local-mysql.sh up; source .local/mysql/env)")
    else:
        url = f"sqlite+aiosqlite:///{folder / 'audit.db'}"
    store = await database.open_store(url)
    trips = RoundTrips(store.sql_engine)
    stuck = StuckWarnings()
    logging.getLogger().addHandler(stuck)
    scheduler = fake_scheduler.FakeScheduler(nodes=[f"node{i}" for i in range(NODES)])
    anomaly_at: dict[str, float] = {}
    outcome_at: dict[str, float] = {}

    parts: dict[str, tuple[float, float]] = {}  # workload -> (line read, detector concluded)

    async def listener(kind: str, workload: str, payload: dict[str, object]) -> None:
        if kind == vocab.AuditKind.ANOMALY:
            anomaly_at.setdefault(workload, time.time())
            seen, concluded = payload.get("first_seen_at"), payload.get("detected_at")
            if isinstance(seen, float) and isinstance(concluded, float):
                parts.setdefault(workload, (seen, concluded))
        elif kind == vocab.AuditKind.OUTCOME:
            outcome_at.setdefault(workload, time.time())

    engine = engine_mod.Engine(
        scheduler, store, loader.parse_text(POLICY, "benchmark policy"), catalog_mod.load_catalog(),
        clock_=clock.SystemClock(), settings=settings_mod.EngineSettings(), listeners=[listener],
    )
    rounds: list[tuple[float, float]] = []  # (start, seconds) of each tailing round
    tail_round = engine.tailing.tail

    async def timed_round() -> None:
        began = time.time()
        try:
            await tail_round()
        finally:
            rounds.append((began, time.time() - began))

    engine.tailing.tail = timed_round  # type: ignore[method-assign]  # Engine.tail calls it each round
    started = time.time()
    names = [f"slurm/bench-{run_id}/{i}" for i in range(args.workloads)]
    for i, name in enumerate(names):
        path = folder / f"{i}.out"
        path.touch()
        scheduler.jobs[str(i)] = workloads.JobSnapshot(
            workload=name, job_id=str(i), name=f"train-{i}", state=workloads.JobState.RUNNING,
            nodes=[f"node{i % NODES}", f"node{(i + 1) % NODES}"], comment="trainguard policy=bench",
            stdout_path=str(path), started_at=started,
        )
    seconds = args.minutes * 60.0
    rng = random.Random(args.seed)
    sample = rng.sample(range(args.workloads), min(args.crashes, args.workloads))
    warm = min(seconds / 3, 60.0)
    crashes = [(warm + (seconds - warm - 5.0) * (k + 0.5) / len(sample), index) for k, index in enumerate(sample)]
    report = folder / "writer.jsonl"
    report.touch()
    plan = folder / "crashes.json"
    plan.write_text(json.dumps(crashes))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--writer", str(folder), "--workloads", str(args.workloads),
        "--minutes", str(args.minutes),
    )
    stop = asyncio.Event()
    cpu0, t0 = _cpu_s(), time.time()
    task = asyncio.create_task(engine.run(stop))
    tracked_after: float | None = None
    half: tuple[float, float] | None = None
    half_trips = (0, 0)
    tracking_trips: int | None = None
    while time.time() - t0 < seconds:
        await asyncio.sleep(0.2)
        ready = sum(1 for rt in engine.runtimes.values() if rt.ready)
        if tracked_after is None and ready >= args.workloads:
            tracked_after = time.time() - t0
            tracking_trips = trips.statements
        if half is None and time.time() - t0 >= seconds / 2:
            half = (_cpu_s(), time.time())
            half_trips = (trips.statements, trips.commits)
    await asyncio.sleep(3.0)  # the last crash's settle window and decision
    cpu1, t1 = _cpu_s(), time.time()
    trips1 = (trips.statements, trips.commits)
    unreadable = len(getattr(engine, "unreadable", {}) or {})
    tracked = sum(1 for rt in engine.runtimes.values() if rt.ready)
    rss = _rss_mb()
    stop.set()
    await asyncio.wait_for(task, timeout=120)
    await store.close()
    await asyncio.wait_for(proc.wait(), timeout=60)
    written_at: dict[str, float] = {}
    lines_written = 0
    for line in report.read_text().splitlines():
        item = json.loads(line)
        if "crash" in item:
            written_at[names[item["crash"]]] = item["at"]
        else:
            lines_written = item["lines_written"]
    detect = [anomaly_at[w] - at for w, at in written_at.items() if w in anomaly_at]
    action = [outcome_at[w] - anomaly_at[w] for w in written_at if w in anomaly_at and w in outcome_at]
    read = [parts[w][0] - at for w, at in written_at.items() if w in parts]
    settle = [parts[w][1] - parts[w][0] for w in written_at if w in parts]
    record = [anomaly_at[w] - parts[w][1] for w in written_at if w in parts]
    h_cpu, h_t = half if half is not None else (cpu0, t0)
    steady = [seconds for began, seconds in rounds if began >= h_t]
    per = args.workloads * max(t1 - h_t, 1e-9) / 60.0  # workload-minutes of the second half
    return {
        **code_commit(),
        "workloads": args.workloads,
        "minutes": args.minutes,
        "db": args.db if "://" not in args.db else database.safe_url(args.db),
        "tracked": tracked,
        "tracked_after_s": round(tracked_after, 2) if tracked_after is not None else None,
        "detect_p50_s": _quantile(detect, 0.5),
        "detect_p99_s": _quantile(detect, 0.99),
        "detect_max_s": round(max(detect), 3) if detect else None,
        "crashes": len(written_at),
        "detect_missed": len(written_at) - len(detect),
        "detect_parts": {
            "read_p50_s": _quantile(read, 0.5), "read_p99_s": _quantile(read, 0.99),
            "settle_p50_s": _quantile(settle, 0.5), "settle_p99_s": _quantile(settle, 0.99),
            "record_p50_s": _quantile(record, 0.5), "record_p99_s": _quantile(record, 0.99),
        },
        "tail_round_s": {"count": len(steady), "p50": _quantile(steady, 0.5), "p99": _quantile(steady, 0.99),
                         "max": round(max(steady), 3) if steady else None},
        "action_p50_s": _quantile(action, 0.5),
        "action_p99_s": _quantile(action, 0.99),
        "rss_mb": round(rss, 1),
        "rss_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "cpu_cores": round((cpu1 - h_cpu) / max(t1 - h_t, 1e-9), 3),
        "cpu_cores_all": round((cpu1 - cpu0) / max(t1 - t0, 1e-9), 3),
        "unreadable": unreadable,
        "lines_written": lines_written,
        "stuck_warnings": stuck.count,
        "round_trips": {
            "statements": trips1[0],
            "commits": trips1[1],
            "statements_per_workload_until_tracked": (round(tracking_trips / args.workloads, 2)
                                                      if tracking_trips is not None else None),
            "statements_per_workload_minute": round((trips1[0] - half_trips[0]) / per, 4),
            "commits_per_workload_minute": round((trips1[1] - half_trips[1]) / per, 4),
        },
        "nofile_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def report(name: str, result: dict[str, Any], missed: list[str]) -> int:
    """Print ``result`` (with its missed goals) as the benchmark's one JSON object, each missed goal on
    stderr; the exit code: 1 when one is missed, else 0."""
    result["missed_goals"] = missed
    print(json.dumps(result, indent=2))
    for line in missed:
        print(f"{name}: goal missed: {line}", file=sys.stderr)
    return 1 if missed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--db", default="sqlite",
                        help="sqlite (default), postgres ($TG_PG_URL), mysql ($TG_MYSQL_URL) or a database URL")
    parser.add_argument("--crashes", type=int, default=20, help="workloads that get a crash line (default 20)")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--workdir", type=Path, default=None, help="where the output files go (default: a temp dir)")
    parser.add_argument("--writer", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.writer is not None:
        crashes = [(float(a), int(b)) for a, b in json.loads((args.writer / "crashes.json").read_text())]
        writer(args.writer, args.workloads, args.minutes * 60.0, crashes, args.writer / "writer.jsonl")
        return 0
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="tg-scale-", dir=args.workdir) as tmp:
        try:
            result = asyncio.run(run(args, Path(tmp)))
        except (database.StoreError, OSError) as exc:
            print(f"scale: {exc}", file=sys.stderr)
            return 2
    result["goals"] = GOALS
    return report("scale", result, missed_goals(result))


if __name__ == "__main__":
    sys.exit(main())
