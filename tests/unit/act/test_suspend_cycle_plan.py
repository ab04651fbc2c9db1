"""The plan of a requeue whose restart is a suspend cycle (a Kubernetes workload): suspend and resume
are two recorded steps, so the watchdog's hold logic covers a process that dies between them (pure)."""

from __future__ import annotations

from trainguard.act import steps
from trainguard.k8s.kubejobs import common
from trainguard.model import actions, advice, vocab

KUBE_ID = common.workload_id("team", "JobSet", "train")


def requeue(**fields: object) -> advice.Advice:
    return advice.Advice.model_validate({"workload": KUBE_ID, "attempt": 1, "generation": 1,
                                         "action": vocab.AdviceAction.REQUEUE, **fields})


def test_a_kubernetes_requeue_is_a_recorded_suspend_then_a_recorded_resume() -> None:
    plan = steps.plan(requeue(), KUBE_ID)
    assert [(s.name, s.operation) for s in plan] == [
        ("requeue_hold", actions.Operation.REQUEUE_HOLD), ("release", actions.Operation.RELEASE)]
    assert all(s.baseline_attempt == 1 for s in plan)
    assert plan[0].operation.places_hold  # the executor records how the suspend looks (hold_seen)
    assert [s.name for s in steps.plan(requeue(exclude_nodes=["n2"]), KUBE_ID)] == [
        "requeue_hold", "exclude_nodes", "release"]


def test_slurm_keeps_its_single_requeue_step() -> None:
    assert [s.name for s in steps.plan(requeue(), "42")] == ["requeue"]
    assert not steps.suspend_cycle("42") and not steps.suspend_cycle("slurm/cluster/42")


def test_the_suspend_cycle_ids_are_the_kubernetes_adapters() -> None:
    assert steps.suspend_cycle(KUBE_ID)
    assert f"{common.PREFIX}/" == steps.SUSPEND_CYCLE_PREFIX
