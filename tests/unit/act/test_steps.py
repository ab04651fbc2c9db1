"""Plans and in-effect tests of the named steps (pure)."""

from __future__ import annotations

from trainguard.act import steps
from trainguard.model import actions, advice, vocab, workloads


def job(**update: object) -> workloads.JobSnapshot:
    base = workloads.JobSnapshot(workload="w", job_id="7", state=workloads.JobState.FAILED, attempt=2)
    return base.model_copy(update=update)


def item(action: vocab.AdviceAction, **fields: object) -> advice.Advice:
    return advice.Advice.model_validate({"workload": "w", "attempt": 2, "generation": 1, "action": action, **fields})


def test_plans_name_their_steps():
    assert [s.name for s in steps.plan(item(vocab.AdviceAction.REQUEUE), "7")] == ["requeue"]
    assert [s.name for s in steps.plan(item(vocab.AdviceAction.REQUEUE, exclude_nodes=["b", "a", "a"]), "7")] == [
        "requeue_hold", "exclude_nodes", "release"]
    assert [s.name for s in steps.plan(item(vocab.AdviceAction.STOP, drain_nodes=["n2", "n1"]), "7")] == [
        "cancel", "drain_node:n1", "drain_node:n2"]
    assert steps.plan(item(vocab.AdviceAction.NONE), "7") == []
    cordon_only = item(vocab.AdviceAction.STOP, drain_nodes=["n1"], drain_in_scheduler=False)
    assert [s.name for s in steps.plan(cordon_only, "7")] == ["cancel"]
    exclude = steps.plan(item(vocab.AdviceAction.REQUEUE, exclude_nodes=["b", "a"]), "7")[1]
    assert exclude.args == {"job_id": "7", "excluded_nodes": ["a", "b"]}


def test_requeue_is_in_effect_once_the_restart_count_moved():
    step = steps.Step("requeue", actions.Operation.REQUEUE, "7", baseline_attempt=2)
    assert not step.in_effect(steps.Observation(job()))
    assert step.in_effect(steps.Observation(job(attempt=3, state=workloads.JobState.PENDING)))


def test_unmet_explains_what_is_missing():
    want = item(vocab.AdviceAction.REQUEUE, exclude_nodes=["bad"])
    assert steps.unmet(want, steps.Observation(job())) == [
        "restart count still 2 (advice is for attempt 2)", "nodes not excluded: bad"]
    requeued = job(attempt=3, state=workloads.JobState.PENDING, held=True, excluded_nodes=["bad"])
    assert steps.unmet(want, steps.Observation(requeued)) == ["job is held"]
    running_elsewhere = job(attempt=3, state=workloads.JobState.RUNNING, nodes=["good"])
    assert steps.unmet(want, steps.Observation(running_elsewhere)) == []
    # On Kubernetes the exclusion (a node taint) still keeps the next restart off the node: a
    # workload that restarted itself elsewhere before we acted still needs it.
    restarted_by_itself = running_elsewhere.model_copy(update={"exclusions_while_running": True})
    assert steps.unmet(want, steps.Observation(restarted_by_itself)) == ["nodes not excluded: bad"]
    drained = steps.Observation(job(state=workloads.JobState.CANCELLED),
                                {"n1": workloads.NodeSnapshot(name="n1", state="DRAIN", drained=True)})
    assert steps.unmet(item(vocab.AdviceAction.STOP, drain_nodes=["n1", "n2"]), drained) == ["node n2 not drained"]
