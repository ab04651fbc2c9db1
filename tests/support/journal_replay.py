"""The replay property, checked against any audit store: every decision the engine recorded in the
audit log is in the signal journal with its inputs, and replaying those inputs under the recorded
policy gives back exactly the recorded verdict and advice.

Used after every engine unit scenario (``tests/unit/engine/conftest.py``) and after a real-Slurm
e2e run (``tests/e2e/test_journal_replay.py``).
"""

from __future__ import annotations

import json
from typing import Any

from trainguard.journal import entries, replay
from trainguard.model import vocab
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
