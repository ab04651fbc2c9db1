"""The per-workload history the policy needs: attempts, checkpoints, retries, exclusions.

Place in the loop: the engine updates it from signals (a checkpoint line, an attempt ending)
and from each Advice; ``policy.decide`` reads it; the store persists it as JSON (every model
here round-trips through ``model_dump(mode="json")``). All helpers are pure: they return a new
history and never change the one they are given, so a decision can be replayed from records.

Retries are counted like Slurm counts restarts (``restart_cnt``, ``Restarts=`` in ``scontrol show
job``, ``SLURM_RESTART_COUNT`` in the job): every requeue, whoever made it (us, a person, Slurm after
a node failure), raises the attempt number, so ``retries_used`` is the highest attempt seen, not the
number of our own actions.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from trainguard.model import vocab


class AttemptRecord(BaseModel):
    """One run of a workload (Slurm: one value of ``Restarts``). Times are epoch seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    attempt: int = Field(ge=0)
    started_at: float | None = None
    ended_at: float | None = None
    checkpoint_saved: bool = False
    last_checkpoint_at: float | None = None
    anomaly_category: vocab.Category | None = None
    attribution: vocab.Attribution | None = None
    action: vocab.AdviceAction | None = None


class WorkloadHistory(BaseModel):
    """Everything the policy remembers about one workload, attempts in ascending order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload: str
    attempts: list[AttemptRecord] = Field(default_factory=list)
    retries_used: int = Field(default=0, ge=0)
    excluded_nodes: list[str] = Field(default_factory=list)
    advice_generation: int = Field(default=0, ge=0)

    def get(self, attempt: int) -> AttemptRecord | None:
        return next((record for record in self.attempts if record.attempt == attempt), None)

    def attempts_without_checkpoint(self, upto: int | None = None) -> int:
        """How many of the latest attempts in a row ended (or are running) without a new checkpoint.

        ``upto``: count back from that attempt, leaving later ones out. A failure is judged on its own
        attempt; a later one that has only just started (the workload's own restart, e.g. a JobSet's
        failure policy, can start it before the judgement) has had no chance to checkpoint yet and
        must not make the failure look like a second attempt without progress.
        """
        count = 0
        for record in reversed(self.attempts):
            if upto is not None and record.attempt > upto:
                continue
            if record.checkpoint_saved:
                break
            count += 1
        return count

    def last_checkpoint_at(self) -> float | None:
        """When the workload last proved progress, across attempts."""
        times = [record.last_checkpoint_at for record in self.attempts if record.last_checkpoint_at is not None]
        return max(times) if times else None


def _with(history: WorkloadHistory, record: AttemptRecord) -> WorkloadHistory:
    others = [existing for existing in history.attempts if existing.attempt != record.attempt]
    attempts = sorted([*others, record], key=lambda item: item.attempt)
    return history.model_copy(update={"attempts": attempts, "retries_used": max(history.retries_used, record.attempt)})


def _record(history: WorkloadHistory, attempt: int) -> AttemptRecord:
    return history.get(attempt) or AttemptRecord(attempt=attempt)


def record_attempt_start(history: WorkloadHistory, attempt: int, at: float) -> WorkloadHistory:
    """Attempt ``attempt`` started (or was first seen) at ``at``; a known start time is kept."""
    record = _record(history, attempt)
    if record.started_at is None:
        record = record.model_copy(update={"started_at": at})
    return _with(history, record)


def record_checkpoint(history: WorkloadHistory, attempt: int, at: float) -> WorkloadHistory:
    """A checkpoint line of attempt ``attempt`` was seen at ``at``."""
    record = _record(history, attempt)
    latest = at if record.last_checkpoint_at is None else max(at, record.last_checkpoint_at)
    return _with(history, record.model_copy(update={"checkpoint_saved": True, "last_checkpoint_at": latest}))


def record_anomaly(
    history: WorkloadHistory,
    attempt: int,
    category: vocab.Category,
    attribution: vocab.Attribution | None = None,
) -> WorkloadHistory:
    """The first cause of attempt ``attempt``'s failure (later calls refine the attribution)."""
    record = _record(history, attempt)
    update: dict[str, object] = {"anomaly_category": category}
    if attribution is not None:
        update["attribution"] = attribution
    return _with(history, record.model_copy(update=update))


def record_attempt_end(
    history: WorkloadHistory,
    attempt: int,
    at: float,
    category: vocab.Category | None = None,
    attribution: vocab.Attribution | None = None,
) -> WorkloadHistory:
    """Attempt ``attempt`` ended at ``at``, optionally with its failure's category and attribution."""
    record = _record(history, attempt)
    update: dict[str, object] = {"ended_at": at}
    if category is not None:
        update["anomaly_category"] = category
    if attribution is not None:
        update["attribution"] = attribution
    return _with(history, record.model_copy(update=update))


def record_advice(
    history: WorkloadHistory, attempt: int, generation: int, action: vocab.AdviceAction, exclude_nodes: list[str]
) -> WorkloadHistory:
    """An Advice of generation ``generation`` was issued for ``attempt``.

    Remembers its action and exclusions (so the next decision merges them), and the highest
    generation, so the engine numbers the next advice ``advice_generation + 1``.
    """
    record = _record(history, attempt).model_copy(update={"action": action})
    merged = list(dict.fromkeys([*history.excluded_nodes, *exclude_nodes]))
    updated = _with(history, record)
    return updated.model_copy(
        update={"excluded_nodes": merged, "advice_generation": max(history.advice_generation, generation)}
    )


def restored(
    workload: str,
    attempts: list[AttemptRecord],
    advice: list[tuple[int, int, vocab.AdviceAction, list[str]]],
) -> WorkloadHistory:
    """The history of a workload an earlier run of the engine tracked, rebuilt from what it recorded
    (attempts with their checkpoint flag and verdict; each advice as (attempt, generation, action,
    exclusions)), so that a restart of ours neither forgets attempts that made no progress
    (``maxAttemptsWithoutCheckpoint``) nor numbers its next advice as an earlier one."""
    history = WorkloadHistory(workload=workload)
    for record in sorted(attempts, key=lambda item: item.attempt):
        history = _with(history, record)
    for attempt, generation, action, exclusions in sorted(advice, key=lambda item: (item[0], item[1])):
        history = record_advice(history, attempt, generation, action, exclusions)
    return history
