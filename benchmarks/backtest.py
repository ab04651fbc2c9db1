"""Benchmark: `trainguard backtest` over 10,000 recorded workloads (target: <= 60 s on 2 cores).

Writes ``--workloads`` journaled decisions (default 10,000; one per workload) into a fresh SQLite
audit database, then times what ``trainguard backtest`` does: read the journal's decisions back,
parse them, and replay every one under a changed policy (attribution with lemon memory and node
evidence, the decision, the blast-radius check). The decisions are four kinds in turn: a GPU
hardware fault naming one node (Xid 79), a Python exception on one rank, a CUDA out-of-memory and
an NCCL watchdog timeout, each with two past implications of its node in lemon memory. Each was
"recorded" by replaying it under the base policy, the engine's own decision code.

Prints one JSON object: ``workloads``, ``decisions``, ``changed``, ``seconds_write`` (setup, not
the target), ``seconds_read``, ``seconds_replay``, ``seconds_total`` (read + replay: the backtest),
``decisions_per_second``, ``target_seconds`` and ``ok``. Exit 0 when ``seconds_total`` is within the
target, 1 otherwise.

    .venv/bin/python benchmarks/backtest.py [--workloads 10000] [--workdir /tmp]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

from trainguard.journal import backtest, entries
from trainguard.policy import loader
from trainguard.store import database, tables
from trainguard.store import journal as journal_store

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.support import journal_replay  # noqa: E402  (the repository root must be importable first)

TARGET_S = 60.0
CHANGED = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: train}
spec:
  mode: Action
  retries: {maxRetries: 1}
  exclusion: {lemonNodeThreshold: 2}
  blastRadius: {maxActionsPerHour: 40}
"""
async def _bench(count: int, workdir: Path) -> dict[str, object]:
    url = f"sqlite+aiosqlite:///{workdir / 'backtest-bench.db'}"
    store = await database.open_store(url)
    try:
        base = loader.parse_text(journal_replay.BASE, "base")
        started = time.perf_counter()
        rows = []
        for index in range(count):
            entry = journal_replay.synthetic_entry(index, base)
            payload = entry.model_dump(mode="json")
            rows.append({"workload": entry.advice.workload, "attempt": entry.advice.attempt, "kind": entries.ADVICE,
                         "at": datetime.datetime.fromtimestamp(entry.at, tz=datetime.UTC),
                         "size": len(json.dumps(payload)), "payload": payload})
        async with store.sql_engine.begin() as connection:
            for chunk in range(0, len(rows), 1000):
                await connection.execute(sa.insert(tables.JournalRow), rows[chunk:chunk + 1000])
        written = time.perf_counter() - started

        journal = journal_store.JournalStore(store.sql_engine, retention_s=0, max_bytes=0)
        started = time.perf_counter()
        decisions = await backtest.load(journal)
        read = time.perf_counter() - started
        started = time.perf_counter()
        found, summary = backtest.run(decisions, loader.parse_text(CHANGED, "changed"))
        replayed = time.perf_counter() - started
    finally:
        await store.close()
    total = read + replayed
    return {
        "workloads": count, "decisions": summary["decisions"], "changed": len(found),
        "summary": {k: summary[k] for k in ("removed_requeues", "extra_requeues", "blocked_by_limits")},
        "seconds_write": round(written, 2), "seconds_read": round(read, 2), "seconds_replay": round(replayed, 2),
        "seconds_total": round(total, 2), "decisions_per_second": round(summary["decisions"] / total, 1),
        "target_seconds": TARGET_S, "ok": total <= TARGET_S,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=10_000)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        result = asyncio.run(_bench(args.workloads, Path(tmp)))
    print(json.dumps(result, sort_keys=True))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
