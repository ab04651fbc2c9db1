"""The watchdog resumes a Kubernetes workload a one-step ``requeue`` of an older version left suspended
(its rows show no hold row), when the scheduler shows the suspend as ours; never a person's suspend."""

from __future__ import annotations

import pytest

from tests.support import fake_scheduler
from tests.unit.act.conftest import START
from trainguard.act import watchdog
from trainguard.k8s.kubejobs import common
from trainguard.model import actions, advice, vocab, workloads
from trainguard.schedulers import base
from trainguard.store import audit

KUBE_ID = common.workload_id("team", "JobSet", "train")
OURS = f"{base.OUR_REASON_PREFIX} restart: suspended, resumed once its pods are gone"


async def left_suspended(store: audit.AuditStore, hold_detail: str,
                         disposition: vocab.Disposition = vocab.Disposition.ABANDONED,
                         ) -> fake_scheduler.FakeScheduler:
    """What the defect left: a one-step requeue row of ours, its generation closed, the JobSet suspended."""
    await store.upsert_workload(workload=KUBE_ID, scheduler="kubernetes", job_id=KUBE_ID, policy="gpu",
                                comment="trainguard policy=gpu", at=START)
    item = advice.Advice.model_validate({"workload": KUBE_ID, "attempt": 0, "generation": 1,
                                         "action": vocab.AdviceAction.REQUEUE, "mode": vocab.Mode.ACTION,
                                         "deadline": START + 300})
    await store.record_advice(item, at=START)
    await store.begin_action(actions.ActionRecord(
        workload=KUBE_ID, attempt=0, generation=1, step="requeue", operation=actions.Operation.REQUEUE,
        args={"job_id": KUBE_ID}), at=START)
    await store.finish_action(workload=KUBE_ID, attempt=0, generation=1, step="requeue",
                              status=actions.ActionStatus.DONE, at=START + 1, error="took effect before a restart")
    await store.record_outcome(actions.OutcomeRecord(
        workload=KUBE_ID, attempt=0, generation=1, disposition=disposition, detail="verify failed: job is held",
        decided_by=vocab.Decider.WATCHDOG, at=START + 2))
    job = workloads.JobSnapshot(workload=KUBE_ID, job_id=KUBE_ID, state=workloads.JobState.PENDING, attempt=1,
                                held=True, hold_reason=common.SUSPENDED_HOLD, hold_detail=hold_detail,
                                exclusions_while_running=True)
    return fake_scheduler.FakeScheduler([job])


async def test_recover_resumes_a_workload_a_one_step_requeue_of_ours_left_suspended(store, manual_clock) -> None:
    scheduler = await left_suspended(store, OURS)
    released = await watchdog.Watchdog(scheduler, store, manual_clock).recover()
    assert [a.workload for a in released] == [KUBE_ID]
    assert not scheduler.jobs[KUBE_ID].held
    rows = {r.step: r for r in await store.actions_for(KUBE_ID, 0, 1)}
    assert rows[watchdog.RELEASE_STEP].status is actions.ActionStatus.DONE
    assert await watchdog.Watchdog(scheduler, store, manual_clock).recover() == []  # settled: once


@pytest.mark.parametrize("detail", ["suspended by someone else", ""])
async def test_recover_never_resumes_a_persons_suspend(store, manual_clock, detail: str) -> None:
    scheduler = await left_suspended(store, detail)
    assert await watchdog.Watchdog(scheduler, store, manual_clock).recover() == []
    assert scheduler.jobs[KUBE_ID].held
    assert [m["operation"] for m in scheduler.mutations] == []


async def test_a_converged_one_step_requeue_is_not_read_again(store, manual_clock) -> None:
    """Verified not held when it converged: a suspend since then is not this generation's."""
    scheduler = await left_suspended(store, OURS, vocab.Disposition.CONVERGED)
    assert await watchdog.Watchdog(scheduler, store, manual_clock).recover() == []
    assert scheduler.jobs[KUBE_ID].held and ("get_job", KUBE_ID) not in scheduler.calls


def test_a_slurm_requeue_is_never_taken_for_a_suspend() -> None:
    slurm = actions.ActionRecord(workload="slurm/c/42", attempt=0, generation=1, step="requeue",
                                 operation=actions.Operation.REQUEUE, args={"job_id": "42"},
                                 status=actions.ActionStatus.DONE)
    assert not watchdog.suspend_left([slurm])
    assert watchdog.suspend_left([slurm.model_copy(update={"args": {"job_id": KUBE_ID}})])
    assert watchdog.OUR_HOLD_PREFIX == base.OUR_REASON_PREFIX
