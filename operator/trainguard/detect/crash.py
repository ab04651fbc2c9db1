"""Crash detection: catalog hits collected over a short settle window, plus the job's exit state.

Place in the loop: ``detect.stream`` hands every catalog hit of an attempt to ``CrashDetector``.
The first fatal/error hit opens a settle window (the cascade of timeouts and aborts on the other
ranks arrives over the next moments); when it closes, ``detect.first_cause`` picks the
initiating event and ONE crash anomaly is emitted. Warning hits are kept as evidence but never
open the window. When the attempt ends (``exit_anomaly``) a failed state or a signal with no
log evidence is still a crash, categorised from the state/signal with attribution unknown.
"""

from __future__ import annotations

import signal as signals
from collections.abc import Callable, Collection, Mapping

from trainguard.detect import first_cause, hosts
from trainguard.model import anomalies, vocab, workloads

C = vocab.Category
EXIT_PATTERN = "crash.exit_state"
"""Evidence pattern name for a crash read from the scheduler's exit state (not a catalog id)."""

_SIGNAL_CATEGORY: Mapping[int, vocab.Category] = {
    int(signals.SIGKILL): C.PROCESS_SIGNAL_KILLED,
    int(signals.SIGSEGV): C.SEGFAULT,
    int(signals.SIGBUS): C.BUS_ERROR_SHM,
    int(signals.SIGABRT): C.PROCESS_SIGNAL_KILLED,
    int(signals.SIGTERM): C.PROCESS_SIGNAL_KILLED,
}


def exit_category(job: workloads.JobSnapshot) -> vocab.Category | None:
    """The crash category the scheduler's view alone supports, or None if the attempt did not fail.

    OUT_OF_MEMORY is the cgroup OOM killer; a signal (``exit_signal`` or an exit code above 128,
    the shell's 128+N) maps SIGKILL/SIGABRT/SIGTERM to ``process_signal_killed``, SIGSEGV to
    ``segfault`` and SIGBUS to ``bus_error_shm``; NODE_FAIL/BOOT_FAIL to
    ``process_signal_killed`` (the processes died with the node). A plain non-zero exit code
    with no evidence is most often an uncaught Python exception whose traceback went to a
    file we do not read, hence ``python_exception`` (attribution stays unknown).
    TIMEOUT, CANCELLED, PREEMPTED and COMPLETED are not crashes; hang detection and the
    policy handle those.
    """
    if job.state == workloads.JobState.OUT_OF_MEMORY:
        return C.OOM_HOST_KILLED
    sig = job.exit_signal
    if not sig and job.exit_code is not None and job.exit_code > 128:
        sig = job.exit_code - 128
    if sig:
        return _SIGNAL_CATEGORY.get(sig, C.PROCESS_SIGNAL_KILLED)
    if job.state in (workloads.JobState.NODE_FAIL, workloads.JobState.BOOT_FAIL):
        return C.PROCESS_SIGNAL_KILLED
    if job.state == workloads.JobState.FAILED:
        return C.PYTHON_EXCEPTION
    return None


def exit_evidence(job: workloads.JobSnapshot, at: float) -> anomalies.Evidence:
    """The scheduler's exit state as one evidence item (line 0: not from a log)."""
    text = f"job {job.job_id} ended {job.state.value}"
    if job.exit_code is not None:
        text += f" exit_code={job.exit_code}"
    if job.exit_signal:
        text += f" signal={job.exit_signal}"
    if job.reason:
        text += f" reason={job.reason}"
    return anomalies.Evidence(
        line=0,
        text=text,
        pattern=EXIT_PATTERN,
        source="scheduler",
        at=at,
        category=exit_category(job) or C.NONE,
        severity=vocab.Severity.FATAL,
    )


class CrashDetector:
    """Collects the evidence of one attempt and concludes once its settle window has passed."""

    def __init__(self, settle_s: float, hints: Mapping[str, vocab.Attribution]) -> None:
        if settle_s < 0:
            raise ValueError(f"settle window must be >= 0, got {settle_s} s")
        self.settle_s = settle_s
        self._hints = {**hints, EXIT_PATTERN: vocab.Attribution.UNKNOWN}
        self.evidence: list[anomalies.Evidence] = []
        self.root_cause: hosts.RootCause | None = None
        self._window_opened: float | None = None
        self._emitted: tuple[vocab.Category, first_cause.Rank] | None = None

    @property
    def has_serious(self) -> bool:
        """Whether any fatal/error hit is on record (then the exit state adds nothing)."""
        return any(e.severity in (vocab.Severity.FATAL, vocab.Severity.ERROR) for e in self.evidence)

    @property
    def window_opened(self) -> float | None:
        return self._window_opened

    def add(self, item: anomalies.Evidence, now: float) -> None:
        """Record a hit; a fatal/error hit opens the settle window if none is open."""
        self.evidence.append(item)
        opens = item.severity in (vocab.Severity.FATAL, vocab.Severity.ERROR)
        if opens and self._window_opened is None:
            self._window_opened = now

    def withdraw(self) -> None:
        """Close the window without a verdict: the workload made progress after the error.

        The evidence so far is kept as warnings, so it is shown as context but can no longer be
        picked as the first cause of a later, real crash.
        """
        self._window_opened = None
        self.evidence = [
            e.model_copy(update={"severity": vocab.Severity.WARNING})
            if e.severity in (vocab.Severity.FATAL, vocab.Severity.ERROR)
            else e
            for e in self.evidence
        ]

    def due(self, now: float) -> bool:
        return self._window_opened is not None and now - self._window_opened >= self.settle_s

    def conclude(
        self,
        now: float,
        *,
        node_of: Callable[[int], str | None] | None = None,
        ranks_seen: Collection[int] = (),
        force: bool = False,
    ) -> anomalies.Anomaly | None:
        """The crash anomaly once the window has passed (``force``: the attempt ended), else None.

        Emitted once per attempt, and again only when the new first cause is of a stronger
        class (e.g. an Xid line that arrived after the timeouts it explains).
        """
        if not force and not self.due(now):
            return None
        found = first_cause.find_first_cause(
            self.evidence, hints=self._hints, root_cause=self.root_cause, node_of=node_of, ranks_seen=ranks_seen
        )
        self._window_opened = None
        if found is None or found.initiating is None:
            return None
        strength = first_cause.classify(found.initiating)
        if self._emitted is not None and (strength >= self._emitted[1] or found.category == self._emitted[0]):
            return None
        self._emitted = (found.category, strength)
        return anomalies.Anomaly(
            symptom=found.symptom,
            category=found.category,
            attribution_hint=found.attribution,
            evidence=found.evidence,
            suspect_nodes=found.suspect_nodes,
            suspect_ranks=found.suspect_ranks,
            first_seen_at=found.initiating.at,
            detected_at=now,
            summary=f"{found.category.value} at line {found.initiating.line}: {found.initiating.text[:200]}",
        )

    @property
    def emitted(self) -> bool:
        return self._emitted is not None
