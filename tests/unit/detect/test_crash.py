"""Crash from the exit state, and the settle window of CrashDetector."""

from __future__ import annotations

import pytest

from trainguard.detect import crash
from trainguard.model import anomalies, vocab, workloads

C = vocab.Category
J = workloads.JobState


def job(
    state: workloads.JobState, exit_code: int | None = None, exit_signal: int | None = None
) -> workloads.JobSnapshot:
    return workloads.JobSnapshot(
        workload="slurm/test/1", job_id="1", state=state, exit_code=exit_code, exit_signal=exit_signal
    )


@pytest.mark.parametrize(
    ("snapshot", "category"),
    [
        (job(J.FAILED, 0, 9), C.PROCESS_SIGNAL_KILLED),
        (job(J.FAILED, 137), C.PROCESS_SIGNAL_KILLED),
        (job(J.FAILED, 139), C.SEGFAULT),
        (job(J.FAILED, 0, 7), C.BUS_ERROR_SHM),
        (job(J.OUT_OF_MEMORY, 0, 0), C.OOM_HOST_KILLED),
        (job(J.NODE_FAIL), C.PROCESS_SIGNAL_KILLED),
        (job(J.FAILED, 1), C.PYTHON_EXCEPTION),
        (job(J.COMPLETED, 0), None),
        (job(J.TIMEOUT, 0, 15), C.PROCESS_SIGNAL_KILLED),
        (job(J.CANCELLED), None),
        (job(J.RUNNING), None),
    ],
)
def test_exit_category(snapshot: workloads.JobSnapshot, category: vocab.Category | None) -> None:
    assert crash.exit_category(snapshot) == category


def _ev(line: int, category: vocab.Category, severity: vocab.Severity, rank: int | None = None) -> anomalies.Evidence:
    return anomalies.Evidence(
        line=line, text=f"line {line}", pattern="test.p", category=category, severity=severity, rank=rank
    )


def test_settle_window_then_one_anomaly() -> None:
    detector = crash.CrashDetector(settle_s=1.0, hints={})
    detector.add(_ev(1, C.NCCL_NETWORK_IB, vocab.Severity.WARNING), now=100.0)
    assert detector.window_opened is None  # a warning does not open the window
    detector.add(_ev(2, C.CUDA_ILLEGAL_MEMORY, vocab.Severity.FATAL, rank=3), now=100.0)
    detector.add(_ev(3, C.NCCL_TIMEOUT, vocab.Severity.ERROR, rank=0), now=100.5)
    assert detector.conclude(100.9) is None
    found = detector.conclude(101.0)
    assert found is not None
    assert (found.symptom, found.category, found.suspect_ranks) == (vocab.Symptom.CRASH, C.CUDA_ILLEGAL_MEMORY, [3])
    detector.add(_ev(4, C.NCCL_TIMEOUT, vocab.Severity.ERROR, rank=1), now=102.0)
    assert detector.conclude(104.0) is None  # same first cause: not emitted again
    detector.add(_ev(5, C.GPU_FALLEN_OFF_BUS, vocab.Severity.FATAL), now=105.0)
    upgraded = detector.conclude(107.0)
    assert upgraded is not None  # stronger (hardware) evidence arrived later
    assert upgraded.category == C.GPU_FALLEN_OFF_BUS


def test_withdrawn_errors_become_context() -> None:
    detector = crash.CrashDetector(settle_s=5.0, hints={})
    detector.add(_ev(1, C.PYTHON_EXCEPTION, vocab.Severity.ERROR, rank=0), now=0.0)
    detector.withdraw()
    assert not detector.due(10.0)
    assert detector.conclude(10.0, force=True) is None
    detector.add(_ev(9, C.OOM_GPU, vocab.Severity.FATAL, rank=2), now=20.0)
    found = detector.conclude(30.0)
    assert found is not None
    assert (found.category, found.suspect_ranks) == (C.OOM_GPU, [2])
    with pytest.raises(ValueError, match="settle"):
        crash.CrashDetector(settle_s=-1, hints={})
