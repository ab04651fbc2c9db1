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

from trainguard.attribute import lemon
from trainguard.journal import backtest, entries, replay
from trainguard.model import advice as advice_model
from trainguard.model import anomalies, verdicts, vocab, workloads
from trainguard.model import evidence as evidence_model
from trainguard.policy import ledger, loader
from trainguard.store import database, tables
from trainguard.store import journal as journal_store

TARGET_S = 60.0
T0 = 1_800_000_000.0
BASE = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: train}
spec:
  mode: Action
  retries: {maxRetries: 3}
"""
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
KINDS = [
    (vocab.Category.GPU_FALLEN_OFF_BUS, "gpu.xid_79", "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
     vocab.Attribution.HARDWARE),
    (vocab.Category.PYTHON_EXCEPTION, "python.traceback", "ValueError: bad batch", vocab.Attribution.APPLICATION),
    (vocab.Category.OOM_GPU, "oom.cuda_out_of_memory", "torch.OutOfMemoryError: CUDA out of memory.",
     vocab.Attribution.APPLICATION),
    (vocab.Category.NCCL_TIMEOUT, "nccl.watchdog_timeout", "Watchdog caught collective operation timeout",
     vocab.Attribution.UNKNOWN),
]


def _entry(index: int, policies: loader.PolicySet) -> entries.AdviceEntry:
    workload = f"slurm/bench/{index}"
    at = T0 + index * 60.0  # one decision a minute: 10,000 over a week
    nodes = [f"node{(index * 2) % 512}", f"node{(index * 2 + 1) % 512}"]
    category, pattern, text, hint = KINDS[index % len(KINDS)]
    attempt = index % 3
    anomaly = anomalies.Anomaly(
        symptom=vocab.Symptom.CRASH, category=category, attribution_hint=hint,
        evidence=[anomalies.Evidence(line=100 + index % 50, text=f"1: {text}", pattern=pattern, at=at - 1,
                                     node=nodes[1], rank=1, category=category, severity=vocab.Severity.FATAL)],
        suspect_nodes=[nodes[1]], suspect_ranks=[1], first_seen_at=at - 1, detected_at=at, summary=text,
    )
    job = workloads.JobSnapshot(workload=workload, job_id=str(index), state=workloads.JobState.FAILED, exit_code=1,
                                attempt=attempt, nodes=nodes, comment="trainguard policy=train", partition="debug")
    history = ledger.WorkloadHistory(workload=workload, attempts=[
        ledger.AttemptRecord(attempt=a, started_at=at - 600 + a, checkpoint_saved=a % 2 == 0)
        for a in range(attempt + 1)], retries_used=attempt)
    implications = [lemon.Implication(node=nodes[1], at=at - 3600 * k, workload=f"slurm/bench/old{k}",
                                      category=category) for k in (1, 2)]
    spec_policy = policies.get("train")
    assert spec_policy is not None
    found = evidence_model.NodeEvidence(sources=[evidence_model.SourceStatus(
        name="slurm-nodes", state=evidence_model.SourceState.USED)])
    placeholder = replay.attribute(entries.Attribution(
        workload=workload, attempt=attempt, at=at, policy="train", spec=spec_policy.spec.model_dump(mode="json"),
        anomaly=anomaly, implications=implications, allocation=nodes, job_nodes=nodes, node_evidence=found,
        verdict=_empty_verdict()), spec_policy.spec)
    attribution = entries.Attribution(
        workload=workload, attempt=attempt, at=at, policy="train", spec=spec_policy.spec.model_dump(mode="json"),
        anomaly=anomaly, implications=implications, allocation=nodes, job_nodes=nodes, node_evidence=found,
        verdict=placeholder)
    draft = entries.AdviceEntry(at=at, attribution=attribution, job=job, history=history, generation=1,
                                partition_nodes=512, allocation=nodes, advice=_empty_advice(workload))
    _verdict, recorded = replay.same_policy(draft)
    return draft.model_copy(update={"advice": recorded})


def _empty_verdict() -> verdicts.Verdict:
    return verdicts.Verdict(attribution=vocab.Attribution.NONE, category=vocab.Category.NONE, confidence=1.0)


def _empty_advice(workload: str) -> advice_model.Advice:
    return advice_model.Advice(workload=workload, attempt=0, generation=1, action=vocab.AdviceAction.NONE,
                         mode=vocab.Mode.MONITOR, deadline=T0)


async def _bench(count: int, workdir: Path) -> dict[str, object]:
    url = f"sqlite+aiosqlite:///{workdir / 'backtest-bench.db'}"
    store = await database.open_store(url)
    try:
        base = loader.parse_text(BASE, "base")
        started = time.perf_counter()
        rows = []
        for index in range(count):
            entry = _entry(index, base)
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
