"""A validation check's job as the scheduler shows it: what ``act.validate`` decides a node's return on.

Place: the value that crosses from a scheduler adapter that runs the site's check (``schedulers.slurm_local``:
a job pinned to the node in our reservation) to ``act.validate``, which may not import the adapters. The
verdict rests on the exit code alone; the output's tail is evidence for the person who repairs the node.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class CheckPhase(enum.StrEnum):
    """Where the check job stands."""

    WAITING = "waiting"
    """Pending or running: no verdict yet."""
    PASSED = "passed"
    """Ended with exit code 0."""
    FAILED = "failed"
    """Ended with a non-zero exit code of its own (the check's verdict on the node)."""
    NO_VERDICT = "no-verdict"
    """Ended without a verdict of the check: cancelled, timed out, node failure, preempted, never started."""
    GONE = "gone"
    """The scheduler no longer knows the job."""


@dataclass(frozen=True, slots=True)
class CheckStatus:
    """One read of the check job."""

    phase: CheckPhase
    state: str = ""
    """The scheduler's own word (``COMPLETED``, ``FAILED``, ``CANCELLED``...)."""
    exit_code: int | None = None
    output_tail: str = ""
    """The last lines of the check's output, or why it could not be read."""
