"""Crash detection: catalog hits collected over a short settle window, plus the job's exit state.

Place in the loop: ``detect.stream`` hands every catalog hit of an attempt to ``CrashDetector``.
The first fatal/error hit opens a settle window (the cascade of timeouts and aborts on the other
ranks arrives over the next moments); when it closes, ``detect.first_cause`` picks the
initiating event and ONE crash anomaly is emitted. Warning hits are kept as evidence but never
open the window. When the attempt ends (``exit_anomaly``) a failed state or a signal with no
log evidence is still a crash, categorised from the state/signal with attribution unknown.

Bounded (issue 28, goal 4: a 4,096-rank cascade prints ~200,000 lines in a second; a failing node
can print the same Xid line 100,000 times a minute): an attempt keeps at most ``MAX_PER_KEY`` hits
per (pattern, strength as a first cause, node, rank, GPU, Xid) and ``MAX_PER_PATTERN`` per pattern,
the earliest ones, and only counts the rest (``repeats``). That keeps what ``first_cause`` reads:
the earliest line of each class and place, every node with hardware evidence, and each rank's
first timeout line (its ``SeqNum`` / ``last completed NCCL work``) for the lagging-rank analysis.
Once an anomaly was emitted, only a hit that could be a stronger first cause reopens the window
(nothing else can change the verdict; ``conclude`` would return None), so a flood after the
verdict costs no conclusions. The anomaly carries at most ``MAX_ANOMALY_EVIDENCE`` lines.
"""

from __future__ import annotations

import signal as signals
from collections.abc import Callable, Collection, Mapping

from trainguard.detect import first_cause, hosts
from trainguard.model import anomalies, vocab, workloads

C = vocab.Category
_SERIOUS = (vocab.Severity.FATAL, vocab.Severity.ERROR)
EXIT_PATTERN = "crash.exit_state"
"""Evidence pattern name for a crash read from the scheduler's exit state (not a catalog id)."""
MAX_PER_KEY = 8
"""Hits kept per (pattern, strength, node, rank, GPU, Xid): the earliest. More than one, as a rank
can time out in several process groups (``_lagging_ranks`` reads the first line of each group)."""
MAX_PER_PATTERN = 16_384
"""Hits kept per pattern: one line per rank of a 16,384-rank job (the lagging-rank analysis needs
each rank's first timeout line); past it a pattern's hits are only counted."""
MAX_ANOMALY_EVIDENCE = 200
"""Evidence lines an anomaly carries: the initiating line, the other hardware lines (attribution
names every node with hardware evidence), then the rest in order. The audit row holds the anomaly;
a cascade's 40,000 lines would make it megabytes."""

Key = tuple[str, int, str | None, int | None, int | None, int | None]
"""(pattern, strength as a first cause, node, rank, GPU, Xid): hits alike for ``first_cause``."""


def key_of(item: anomalies.Evidence, strength: first_cause.Rank) -> Key:
    """The ``Key`` of a hit, ``strength`` being its ``first_cause.classify``."""
    return (item.pattern, int(strength), item.node, item.rank, item.gpu, item.xid)


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
        self.repeats = 0
        """Hits counted but not kept (``MAX_PER_KEY``, ``MAX_PER_PATTERN``)."""
        self.has_fatal = False
        """A fatal hit is on record (it is never withdrawn)."""
        self._kept: dict[Key, int] = {}
        self._per_pattern: dict[str, int] = {}
        self._window_opened: float | None = None
        self._emitted: tuple[vocab.Category, first_cause.Rank] | None = None

    @property
    def has_serious(self) -> bool:
        """Whether any fatal/error hit is on record (then the exit state adds nothing)."""
        return any(e.severity in _SERIOUS for e in self.evidence)

    @property
    def window_opened(self) -> float | None:
        return self._window_opened

    def add(self, item: anomalies.Evidence, now: float) -> bool:
        """Record a hit; a fatal/error hit opens the settle window if none is open (after a verdict,
        only one that could be a stronger first cause). False: a repeat, only counted."""
        strength = first_cause.classify(item)
        key = key_of(item, strength)
        if self._kept.get(key, 0) >= MAX_PER_KEY or self._per_pattern.get(item.pattern, 0) >= MAX_PER_PATTERN:
            self.repeats += 1
            return False
        self._kept[key] = self._kept.get(key, 0) + 1
        self._per_pattern[item.pattern] = self._per_pattern.get(item.pattern, 0) + 1
        self.evidence.append(item)
        self.has_fatal = self.has_fatal or item.severity == vocab.Severity.FATAL
        opens = item.severity in _SERIOUS and (self._emitted is None or strength < self._emitted[1])
        if opens and self._window_opened is None:
            self._window_opened = now
        return True

    def withdraw(self) -> None:
        """Close the window without a verdict: the workload made progress after the error.

        The evidence so far is kept as warnings, so it is shown as context but can no longer be
        picked as the first cause of a later, real crash. As warnings they are hits of other keys
        (their strength changed): at most ``MAX_PER_KEY`` of each are kept, so a retry loop that
        fails and recovers forever stays bounded.
        """
        self._window_opened = None
        kept: list[anomalies.Evidence] = []
        counts: dict[Key, int] = {}
        per_pattern: dict[str, int] = {}
        for item in self.evidence:
            e = item.model_copy(update={"severity": vocab.Severity.WARNING}) if item.severity in _SERIOUS else item
            key = key_of(e, first_cause.classify(e))
            if counts.get(key, 0) < MAX_PER_KEY:
                counts[key] = counts.get(key, 0) + 1
                per_pattern[e.pattern] = per_pattern.get(e.pattern, 0) + 1
                kept.append(e)
        self.evidence, self._kept, self._per_pattern = kept, counts, per_pattern

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
            evidence=_bounded(found.evidence),
            suspect_nodes=found.suspect_nodes,
            suspect_ranks=found.suspect_ranks,
            first_seen_at=found.initiating.at,
            detected_at=now,
            summary=f"{found.category.value} at line {found.initiating.line}: {found.initiating.text[:200]}",
        )

    @property
    def emitted(self) -> bool:
        return self._emitted is not None


def _bounded(evidence: list[anomalies.Evidence]) -> list[anomalies.Evidence]:
    """At most ``MAX_ANOMALY_EVIDENCE`` lines, in the given order: the initiating (first) line, the
    hardware lines (``attribute.rules`` names each node with a hardware Xid), then the earliest rest."""
    if len(evidence) <= MAX_ANOMALY_EVIDENCE:
        return evidence
    chosen = {0}
    for index, item in enumerate(evidence):
        if len(chosen) >= MAX_ANOMALY_EVIDENCE:
            break
        if item.category in first_cause.HARDWARE_CATEGORIES or item.xid is not None:
            chosen.add(index)
    for index in range(len(evidence)):
        if len(chosen) >= MAX_ANOMALY_EVIDENCE:
            break
        chosen.add(index)
    return [evidence[index] for index in sorted(chosen)]
