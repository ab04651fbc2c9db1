"""What the Slurm adapters say about a hold (whose it may be) and about a node (usable or not)."""

from __future__ import annotations

import pytest

from trainguard.model import workloads
from trainguard.schedulers import slurm_cli

JOB = ("JobId=7 JobName=t UserId=root(0) Priority={priority} JobState=PENDING Reason={reason} Restarts=1 "
       "Comment=trainguard")


def _text(priority: int, reason: str) -> workloads.JobSnapshot:
    return slurm_cli.job_from_scontrol(slurm_cli.parse_kv_line(JOB.format(priority=priority, reason=reason)), "c")


def test_scontrol_text_after_requeuehold_shows_the_description_not_the_code() -> None:
    job = _text(0, "job_requeued_in_held_state")
    assert (job.held, job.hold_reason, job.hold_detail) == (True, "", "job requeued in held state")


@pytest.mark.parametrize("reason", ["JobHeldAdmin", "JobHeldUser"])
def test_scontrol_text_of_a_plain_hold_shows_the_code(reason: str) -> None:
    job = _text(0, reason)
    assert (job.held, job.hold_reason, job.hold_detail) == (True, reason, "")


def test_a_job_that_is_not_held_has_no_hold_fields() -> None:
    job = _text(4294901759, "None")
    assert (job.held, job.hold_reason, job.hold_detail) == (False, "", "")


def test_json_has_both_code_and_description() -> None:
    """22.05 ``squeue --json`` after ``scontrol requeuehold`` and then a person's ``scontrol hold``."""
    record = {"job_id": 7, "job_state": "PENDING", "state_reason": "JobHeldAdmin",
              "state_description": "job requeued in held state", "priority": 0, "comment": "trainguard"}
    job = slurm_cli.job_from_json(record, "c")
    assert job is not None
    assert (job.held, job.hold_reason, job.hold_detail) == (True, "JobHeldAdmin", "job requeued in held state")
    released = slurm_cli.job_from_json({**record, "state_reason": "None", "state_description": "",
                                        "priority": 4294901758}, "c")
    assert released is not None and (released.held, released.hold_reason, released.hold_detail) == (False, "", "")


@pytest.mark.parametrize(
    ("state", "usable"),
    [
        ("IDLE", True), ("MIXED", True), ("ALLOCATED", True), ("ALLOCATED+COMPLETING", True), ("IDLE+PLANNED", True),
        ("IDLE+DRAIN", False), ("MIXED+DRAIN", False), ("DOWN", False), ("DOWN+NOT_RESPONDING", False),
        ("IDLE+NOT_RESPONDING", False), ("IDLE*", False), ("FUTURE", False), ("IDLE+POWERED_DOWN", False),
        ("MIXED+FAIL", False), ("UNKNOWN", False), ("", False), ("IDLE+MAINTENANCE", False),
    ],
)
def test_node_usable(state: str, usable: bool) -> None:
    node = slurm_cli.node_from_fields("node1", state, "", "debug")
    assert node.usable is usable
