"""Second reading of a crash verdict with what only the whole file shows (``trainguard detect``).

Place: ``static.FileAnalyzer`` asks ``crash`` after ``first_cause`` named the first cause of a
file that failed, with the ``postmortem.Collector`` of that file. Each rule below names the
vendor's or the framework's own documentation it rests on and how sure it is (``confidence``,
on the scale of ``attribute.rules``: 0.75 is a rule, 0.6 a table entry). No rule here touches a
``hardware`` verdict: only ``unknown`` attributions are made more precise, and a hang is named only
where the kill came after a measured silence.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainguard.detect import postmortem
from trainguard.model import anomalies, vocab

_SILENCE_ENDINGS = frozenset({vocab.Category.PROCESS_SIGNAL_KILLED})
"""Causes that can be the end of a silence rather than a failure of their own: the scheduler's time
limit or a cancel, a launcher's SIGTERM/SIGKILL."""


@dataclass(frozen=True, slots=True)
class Crash:
    """The fields of a crash verdict that a rule may change."""

    symptom: vocab.Symptom
    category: vocab.Category
    attribution: vocab.Attribution
    evidence: list[anomalies.Evidence]
    summary: str
    confidence: float | None = None
    keep_suspects: bool = True
    """False when the rule names no culprit (a silence: the node a time limit ended on is no suspect)."""


def crash(verdict: Crash, collector: postmortem.Collector) -> Crash:
    """``verdict`` after the whole-file rules: a kill after a long silence is a hang, and a host OOM
    kill after the process's own memory grew is the application's."""
    first = verdict.evidence[0] if verdict.evidence else None
    if first is not None and verdict.category in _SILENCE_ENDINGS:
        # Rule: the scheduler or the launcher ended a run that had already stopped. Slurm's own
        # documentation of the time limit (sbatch --time, "When the time limit is reached, each task in
        # each job step is sent SIGTERM followed by SIGKILL") says the kill is the limit being enforced,
        # not a failure; what stopped the run is what happened before it. A silence of at least
        # ``postmortem.MIN_SILENCE_S`` (the live hang timeout) since the last sign of life is that
        # failure: a hang (PyTorch's own guidance for a job that stops making progress without an
        # error is the same: a hang, diagnosed with the flight recorder / py-spy, not a crash).
        # Confidence 0.6: the silence is measured, but what the program was doing is not known.
        found = postmortem.silence(collector, closing=(first.line, first.text))
        if found is not None:
            return Crash(
                vocab.Symptom.HANG,
                vocab.Category.PROGRESS_STALLED,
                vocab.Attribution.UNKNOWN,
                [*found.evidence, *(item for item in verdict.evidence[1:] if item.line != first.line)],
                f"{found.summary}, which ended the run",
                0.6,
                keep_suspects=False,
            )
    if verdict.category == vocab.Category.OOM_HOST_KILLED and verdict.attribution == vocab.Attribution.UNKNOWN:
        # Rule: the kernel's OOM killer picks the process with the highest badness score, which is its
        # memory use (Linux kernel documentation, Documentation/filesystems/proc.rst, "/proc/<pid>/oom_score":
        # "the process with the highest score is killed"; mm/oom_kill.c oom_badness); a bare `Killed`
        # from the shell or exit code 137/-9 is that SIGKILL (bash(1): 128+9). When the process's own
        # host-memory figures rose before the kill, it grew until it was chosen: the application's
        # memory (PyTorch's documentation of DataLoader workers names the usual cause: "CPU memory
        # grows" when Python objects in the dataset are read by workers, copy-on-access). A retry
        # elsewhere grows the same way. Confidence 0.7: the growth is in the log, the victim's name
        # may not be.
        growth = postmortem.memory_growth(collector)
        if growth:
            first_mb, last_mb = collector.memory[0][2], collector.memory[-1][2]
            return replace(
                verdict,
                attribution=vocab.Attribution.APPLICATION,
                evidence=[*verdict.evidence, *growth],
                summary=f"{verdict.summary}; the process's own host memory grew before the kill "
                f"({first_mb:g} -> {last_mb:g} GB, lines {growth[0].line} and {growth[-1].line})",
                confidence=0.7,
            )
    return verdict
