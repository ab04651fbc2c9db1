"""Whose change is it: the workload's failure, ours, or a person's (or the scheduler's) decision.

Place in the loop: the one rule every decision and every step consults before the scheduler is
touched. The engine asks ``ending`` when it is about to decide on an attempt (a person's cancel,
the scheduler's time limit or preemption is recorded, never answered with a recovery), and the
executor asks ``interference`` with a fresh read before every step of a recovery in flight (a
person who cancelled, requeued or held the job meanwhile, or changed the exclusions we set, has
taken the job back: we stop, release only a hold that is still ours, and say why).

The scheduler's own record decides, read fresh, together with our own action rows (what we did is
known from those alone; everything else somebody else did):

- ``CANCELLED`` with no cancel of ours for the attempt: a person (the job's user or an
  administrator: Slurm's ``scancel``; on Kubernetes a suspend with our stop annotation is ours, a
  deletion ends tracking altogether). Slurm records the requesting uid only in accounting
  (``sacct`` "CANCELLED by UID"), which a cluster may not run, so "not ours" is the rule and the
  uid is never needed.
- ``PREEMPTED`` and ``DEADLINE``: the scheduler's decision under its own policy.
- ``TIMEOUT``: the scheduler enforcing the time limit the user asked for. Decided deliberately: a
  time limit is not a failure we may undo by requeueing (jobs that chain themselves across time
  limits do so on their own). A job that hung before its limit is caught by hang detection while it
  runs (``detection.hangTimeout``), and that anomaly is decided on as usual; a hang longer than the
  time left shows only as TIMEOUT and is recorded, not acted on.
- A restart count that moved without a requeue of ours for the attempt: a person's
  ``scontrol requeue`` (or Slurm's own requeue after a node failure): the job already runs again
  under someone else's decision. Workloads that restart themselves by design (a PyTorchJob's or a
  JobSet's own restart policy, ``JobSnapshot.exclusions_while_running``) are exempt: their restart
  is the workload's, and the node exclusion of our advice still keeps it off the bad node.
- A hold we did not place (no hold row of ours for the attempt, or in flight for the generation): a
  person's hold, or a Kubernetes workload a person suspended.
- A Kubernetes workload that disappears while not finished (it has an incarnation: the object's uid)
  was deleted by someone: recorded by the engine when discovery sees it go.
- Exclusions we set (a done ``exclude_nodes`` row) that the job no longer shows: a person changed
  ``ExcNodeList``.

Pure: the callers pass the fresh snapshot and our rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from trainguard.model import actions, workloads

JobState = workloads.JobState
Op = actions.Operation

_MEANT = frozenset({actions.ActionStatus.INTENT, actions.ActionStatus.DONE})
_REQUEUES = frozenset({Op.REQUEUE, Op.REQUEUE_HOLD})
_HOLDS = frozenset({Op.HOLD, Op.REQUEUE_HOLD})

PERSON = "person"
SCHEDULER = "scheduler"


@dataclasses.dataclass(frozen=True)
class Change:
    """Somebody else's decision about the workload: who (``person`` or ``scheduler``), what, and why
    we take it so (recorded in the audit log, shown in the console and as an Event)."""

    who: str
    what: str
    detail: str

    def payload(self, job: workloads.JobSnapshot) -> dict[str, object]:
        """The audit payload of this change (an ``action`` record with status ``not-ours``)."""
        return {"status": "not-ours", "by": self.who, "change": self.what, "detail": self.detail,
                "state": job.state.value, "reason": job.reason, "attempt_now": job.attempt}

    def __str__(self) -> str:
        return f"{self.detail} ({self.who}'s decision)"


def _ours(rows: Sequence[actions.ActionRecord], operations: frozenset[Op], attempt: int) -> bool:
    return any(r.attempt == attempt and r.operation in operations and r.status in _MEANT for r in rows)


def _held_by_us(ours: Sequence[actions.ActionRecord], attempt: int) -> bool:
    """Whether a hold of ``attempt`` may be ours: a hold of it, or our requeue-hold of the attempt before
    (it holds the next attempt: the restart count moves with the requeue)."""
    return (_ours(ours, _HOLDS, attempt) or _ours(ours, frozenset({Op.REQUEUE_HOLD}), attempt - 1))


def restarts_itself(job: workloads.JobSnapshot) -> bool:
    """Whether the workload restarts itself by design (a Kubernetes workload's restart policy): a
    moved restart count is then the workload's own, not a person's requeue."""
    return job.exclusions_while_running


def ending(job: workloads.JobSnapshot, attempt: int, ours: Sequence[actions.ActionRecord]) -> Change | None:
    """Somebody else's decision that ended (or replaced) ``attempt`` of the job, from a fresh read and
    our action rows for the workload; None when the workload's own failure (or nothing) explains it."""
    if job.attempt > attempt:
        if restarts_itself(job) or _ours(ours, _REQUEUES, attempt):
            return None
        return Change(PERSON, "requeued", f"attempt {attempt} was requeued by someone else (restart count now "
                                          f"{job.attempt}, no requeue of ours)")
    if job.attempt < attempt:
        return None
    if job.held and not job.state.finished and not _held_by_us(ours, attempt):
        # a person's hold, or a Kubernetes workload a person suspended (its pods go: not a failure)
        return Change(PERSON, "held", f"the job is held ({job.hold_reason or 'hold'}"
                                      f"{': ' + job.hold_detail if job.hold_detail else ''}), not by Trainguard")
    match job.state:
        case JobState.CANCELLED if not _ours(ours, frozenset({Op.CANCEL}), attempt):
            return Change(PERSON, "cancelled", "the job was cancelled, not by Trainguard")
        case JobState.PREEMPTED:
            return Change(SCHEDULER, "preempted", "the scheduler preempted the job")
        case JobState.DEADLINE:
            return Change(SCHEDULER, "deadline", "the scheduler ended the job at its deadline")
        case JobState.TIMEOUT:
            return Change(SCHEDULER, "time-limit", "the job reached its time limit")
    return None


def interference(job: workloads.JobSnapshot, attempt: int, rows: Sequence[actions.ActionRecord],
                 ours: Sequence[actions.ActionRecord]) -> Change | None:
    """A person's change to a job while a recovery of ours is in flight (fresh read ``job``; ``rows``
    the action rows of this generation, ``ours`` every action row of the workload), or None.

    Beyond ``ending``: a hold we did not place, and exclusions of ours that the job no longer shows.
    A restart count moved by our own requeue of this generation is ours (``rows``)."""
    change = ending(job, attempt, [*ours, *rows])
    if change is not None:
        return change
    if job.held and not job.state.finished and not any(r.operation in _HOLDS and r.status in _MEANT for r in rows):
        return Change(PERSON, "held", f"the job is held ({job.hold_reason or 'hold'}"
                                      f"{': ' + job.hold_detail if job.hold_detail else ''}), not by Trainguard")
    set_by_us = {str(n) for r in rows if r.operation is Op.EXCLUDE_NODES and r.status is actions.ActionStatus.DONE
                 for n in r.args.get("excluded_nodes", [])}
    removed = sorted(set_by_us - set(job.excluded_nodes))
    if removed and job.attempt <= attempt + 1 and not job.state.finished and not job.exclusions_while_running:
        return Change(PERSON, "exclusions-changed", f"someone removed our exclusion of {', '.join(removed)} "
                                                    "from the job")
    return None
