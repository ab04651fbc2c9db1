"""The replay property, checked against any audit store: every decision the engine recorded in the
audit log is in the signal journal with its inputs, and replaying those inputs under the recorded
policy gives back exactly the recorded verdict and advice.

Used after every engine unit scenario (``tests/unit/engine/conftest.py``) and after a real-Slurm
e2e run (``tests/e2e/test_journal_replay.py``).
"""

from __future__ import annotations

import json
from typing import Any

from trainguard.attribute import lemon
from trainguard.journal import entries, replay
from trainguard.model import advice as advice_model
from trainguard.model import anomalies as anomalies_model
from trainguard.model import evidence as evidence_model
from trainguard.model import verdicts as verdicts_model
from trainguard.model import vocab, workloads
from trainguard.policy import ledger, loader
from trainguard.store import audit
from trainguard.store import journal as journal_store


def _key(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True)


async def check(store: audit.AuditStore) -> dict[str, int]:
    """Assert the property on ``store``; the counts of what was checked (for tests to assert on)."""
    journal = journal_store.JournalStore(store.sql_engine, retention_s=1e12, max_bytes=10**12)
    rows = await journal.read()
    anomalies: set[str] = set()
    verdicts: set[str] = set()
    advice: set[str] = set()
    decided: set[tuple[str, int]] = set()
    counts = {"verdict": 0, "advice": 0, "audit_anomalies": 0, "audit_verdicts": 0, "audit_advice": 0}
    for row in rows:
        entry = replay.parse(row.kind, row.payload)
        if isinstance(entry, entries.VerdictEntry):
            item = entry.attribution
            replayed = replay.attribute(item, replay.spec_of(item.spec))
            assert replayed == item.verdict, f"{item.workload} #{item.attempt}: verdict {replayed} != {item.verdict}"
            anomalies.add(_key(item.anomaly.model_dump(mode="json")))
            decided.add((item.workload, item.attempt))
            verdicts.add(_key(item.verdict.model_dump(mode="json")))
            counts["verdict"] += 1
        elif isinstance(entry, entries.AdviceEntry):
            verdict, item2 = replay.same_policy(entry)
            assert verdict == entry.attribution.verdict
            assert item2 == entry.advice, f"{entry.advice.workload}: advice {item2} != {entry.advice}"
            advice.add(_key(entry.advice.model_dump(mode="json")))
            counts["advice"] += 1
    for record in await store.audit_records():
        payload = dict(record.payload)
        if record.kind == vocab.AuditKind.ANOMALY:
            assert _key(payload) in anomalies, f"anomaly not journaled: {payload}"
            counts["audit_anomalies"] += 1
        elif record.kind == vocab.AuditKind.VERDICT:
            payload.pop("nodes", None)
            assert _key(payload) in verdicts, f"verdict not journaled: {payload}"
            counts["audit_verdicts"] += 1
        elif (record.kind == vocab.AuditKind.ADVICE and record.decided_by == vocab.Decider.POLICY_ENGINE.value
              and (record.workload, record.attempt) in decided):
            # (advice of an attempt the engine never attributed was written by a test itself, to
            # set up a restart: it has no inputs to journal)
            payload.pop("exclusions", None)
            assert _key(payload) in advice, f"advice not journaled: {payload}"
            counts["audit_advice"] += 1
    return counts


# -- synthetic journaled decisions (the HTTP API tests and benchmarks/backtest.py) -------------------------

T0 = 1_800_000_000.0
BASE = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: train}
spec:
  mode: Action
  retries: {maxRetries: 3}
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


def synthetic_entry(index: int, policies: loader.PolicySet) -> entries.AdviceEntry:
    """Decision ``index`` (one workload each, one a minute from T0): four failure kinds in turn, each
    naming rank 1's node, with two past implications of it in lemon memory; its advice is what the
    engine's own decision code gives under ``policies``' ``train`` policy (``BASE``)."""
    workload = f"slurm/bench/{index}"
    at = T0 + index * 60.0  # one decision a minute: 10,000 over a week
    nodes = [f"node{(index * 2) % 512}", f"node{(index * 2 + 1) % 512}"]
    category, pattern, text, hint = KINDS[index % len(KINDS)]
    attempt = index % 3
    anomaly = anomalies_model.Anomaly(
        symptom=vocab.Symptom.CRASH, category=category, attribution_hint=hint,
        evidence=[anomalies_model.Evidence(line=100 + index % 50, text=f"1: {text}", pattern=pattern, at=at - 1,
                                           node=nodes[1], rank=1, category=category,
                                           severity=vocab.Severity.FATAL)],
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


def _empty_verdict() -> verdicts_model.Verdict:
    return verdicts_model.Verdict(attribution=vocab.Attribution.NONE, category=vocab.Category.NONE, confidence=1.0)


def _empty_advice(workload: str) -> advice_model.Advice:
    return advice_model.Advice(workload=workload, attempt=0, generation=1, action=vocab.AdviceAction.NONE,
                               mode=vocab.Mode.MONITOR, deadline=T0)


def _empty_verdict() -> verdicts_model.Verdict:
    return verdicts_model.Verdict(attribution=vocab.Attribution.NONE, category=vocab.Category.NONE, confidence=1.0)


def _empty_advice(workload: str) -> advice_model.Advice:
    return advice_model.Advice(workload=workload, attempt=0, generation=1, action=vocab.AdviceAction.NONE,
                               mode=vocab.Mode.MONITOR, deadline=T0)


