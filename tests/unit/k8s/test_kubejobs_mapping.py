"""How the Kubernetes adapter reads JobSets, PyTorchJobs, their pods and nodes (pure functions over
the API's own object shapes), and which patches it writes on nodes: a person's taints and cordons
are never part of what we lift."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trainguard.k8s import recovery, status
from trainguard.k8s.kubejobs import common, jobset, nodes, pytorchjob
from trainguard.model import vocab, workloads
from trainguard.schedulers import base


def a_jobset(*, annotations: dict[str, str] | None = None, status: dict[str, Any] | None = None,
             suspend: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": "train", "namespace": "ml", "labels": {"team": "a"},
                     "annotations": {"trainguard.dev/policy": "gpu"} if annotations is None else annotations,
                     "creationTimestamp": "2026-12-01T10:00:00Z"},
        "spec": {"suspend": suspend, "failurePolicy": {"maxRestarts": 3},
                 "replicatedJobs": [{"name": "leaders"}, {"name": "workers"}]},
        "status": status or {},
    }


def a_pod(name: str, node: str, rjob: str, index: int, *, phase: str = "Running",
          terminated: dict[str, Any] | None = None) -> dict[str, Any]:
    state = {"terminated": terminated} if terminated else {"running": {}}
    return {
        "metadata": {"name": name, "labels": {jobset.NAME_LABEL: "train", jobset.REPLICATED_JOB_LABEL: rjob,
                                              jobset.JOB_INDEX_LABEL: "0", jobset.COMPLETION_INDEX: str(index)}},
        "spec": {"nodeName": node},
        "status": {"phase": phase, "startTime": "2026-12-01T10:00:05Z",
                   "containerStatuses": [{"name": "t", "restartCount": 0, "state": state}]},
    }


PODS = [a_pod("w1", "n4", "workers", 1), a_pod("l0", "n1", "leaders", 0), a_pod("w0", "n3", "workers", 0),
        a_pod("l1", "n2", "leaders", 1)]


def test_jobset_snapshot_in_rank_order_with_identity_and_routing_fields() -> None:
    job = common.snapshot(jobset.KIND, a_jobset(status={"restarts": 2}), PODS, ["n9"])
    assert job.workload == job.job_id == "k8s/ml/JobSet/train"
    assert job.nodes == ["n1", "n2", "n3", "n4"] and job.num_tasks == 4 and job.tasks_per_node == 1
    assert job.state is workloads.JobState.RUNNING and job.attempt == 2
    assert job.comment == "trainguard policy=gpu" and job.namespace == "ml" and job.labels == {"team": "a"}
    assert job.stdout_path == "k8s://ml/JobSet/train" and job.stderr_path is None
    assert job.excluded_nodes == ["n9"] and not job.held


def test_exit_code_and_reason_of_the_failed_container() -> None:
    pods = [*PODS[:3], a_pod("l1", "n2", "leaders", 1, phase="Failed",
                             terminated={"exitCode": 137, "reason": "OOMKilled"})]
    job = common.snapshot(jobset.KIND, a_jobset(), pods, [])
    assert (job.exit_code, job.reason) == (137, "OOMKilled")
    remembered = common.Failure(pod="old", node="n2", exit_code=79, reason="Error")
    assert common.snapshot(jobset.KIND, a_jobset(), PODS, [], remembered).exit_code == 79


@pytest.mark.parametrize(("status", "state"), [
    ({"terminalState": "Completed"}, workloads.JobState.COMPLETED),
    ({"terminalState": "Failed", "restarts": 3}, workloads.JobState.FAILED),
    ({"conditions": [{"type": "Failed", "status": "True"}]}, workloads.JobState.FAILED),
    ({"conditions": [{"type": "Completed", "status": "False"}]}, workloads.JobState.RUNNING),
])
def test_jobset_state_from_its_terminal_state_and_conditions(status: dict[str, Any], state: workloads.JobState) -> None:
    assert common.snapshot(jobset.KIND, a_jobset(status=status), PODS, []).state is state


def test_our_suspend_is_a_hold_a_persons_suspend_is_shown_as_not_ours_and_our_restarts_count() -> None:
    ours = a_jobset(suspend=True, annotations={"trainguard.dev/policy": "gpu", common.RESTARTS_ANNOTATION: "1",
                                               common.SUSPENDED_BY_ANNOTATION: "trainguard: restart"})
    job = common.snapshot(jobset.KIND, ours, [], [])
    assert job.held and job.state is workloads.JobState.PENDING and job.attempt == 1
    assert job.hold_detail == "trainguard: restart"
    theirs = common.snapshot(jobset.KIND, a_jobset(suspend=True), [], [])
    assert theirs.held and theirs.hold_detail == "suspended by someone else"
    stopped = {**ours, "metadata": {**ours["metadata"], "annotations": {
        **ours["metadata"]["annotations"], common.STOPPED_ANNOTATION: "trainguard: stop"}}}
    assert common.snapshot(jobset.KIND, stopped, [], []).state is workloads.JobState.CANCELLED


@pytest.mark.parametrize(("notes", "comment"), [
    ({}, None),
    ({"trainguard.dev/policy": ""}, "trainguard"),
    ({"trainguard.dev/policy": "gpu-a"}, "trainguard policy=gpu-a"),
    ({"trainguard.dev/policy": "Not A Name"}, 'trainguard policy="Not A Name"'),
    ({"trainguard.dev/policy": "gpu", "trainguard.dev/overrides": " hang-timeout=90s\n max-retries=1"},
     "trainguard policy=gpu hang-timeout=90s max-retries=1"),
    ({"trainguard.dev/overrides": "hang-timeout=90s"}, None),  # overrides alone are no opt-in
])
def test_opt_in_is_the_annotation_only(notes: dict[str, str], comment: str | None) -> None:
    assert common.comment_of({"metadata": {"annotations": notes}}) == comment


def test_pytorchjob_master_is_rank_zero_and_suspend_lives_in_run_policy() -> None:
    def pod(kind: str, index: int, node: str, restarts: int = 0) -> dict[str, Any]:
        return {"metadata": {"name": f"{kind}-{index}", "labels": {
                    pytorchjob.NAME_LABEL: "ptj", pytorchjob.REPLICA_TYPE_LABEL: kind,
                    pytorchjob.REPLICA_INDEX_LABEL: str(index)}},
                "spec": {"nodeName": node},
                "status": {"phase": "Running", "containerStatuses": [{"restartCount": restarts, "state": {}}]}}

    obj = {"metadata": {"name": "ptj", "namespace": "ml", "annotations": {"trainguard.dev/policy": "gpu"}},
           "spec": {"runPolicy": {"suspend": True}}, "status": {}}
    job = common.snapshot(pytorchjob.KIND, obj, [pod("worker", 1, "n3", 2), pod("master", 0, "n1"),
                                                 pod("worker", 0, "n2")], [])
    assert job.nodes == ["n1", "n2", "n3"] and job.attempt == 2 and job.held
    assert pytorchjob.KIND.suspend_patch(False) == {"spec": {"runPolicy": {"suspend": False}}}
    assert jobset.KIND.suspend_patch(True) == {"spec": {"suspend": True}}


def a_node(*, taints: list[dict[str, str]] | None = None, unschedulable: bool = False, ready: bool = True,
           record: dict[str, Any] | None = None) -> dict[str, Any]:
    notes = {nodes.EXCLUDED_BY_ANNOTATION: json.dumps(record)} if record else {}
    return {"metadata": {"name": "n2", "resourceVersion": "7", "annotations": notes},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


PERSON = {"key": "example.com/maintenance", "effect": "NoSchedule"}


def test_exclusion_keeps_a_persons_taint_and_remembers_whether_the_cordon_is_ours() -> None:
    patch = nodes.exclude_patch(a_node(taints=[PERSON]), "k8s/ml/JobSet/train", "suspect node", 100.0)
    assert patch is not None and patch["metadata"]["resourceVersion"] == "7"
    assert patch["spec"]["unschedulable"] is True
    assert patch["spec"]["taints"] == [PERSON, {"key": nodes.TAINT_KEY, "value": "k8s.ml.JobSet.train",
                                                "effect": "NoExecute"}]
    record = json.loads(patch["metadata"]["annotations"][nodes.EXCLUDED_BY_ANNOTATION])
    assert record == {"workload": "k8s/ml/JobSet/train", "reason": "trainguard: suspect node", "at": 100.0,
                      "cordoned": True}
    cordoned = nodes.exclude_patch(a_node(unschedulable=True), "w", "r", 1.0)
    assert cordoned is not None
    assert json.loads(cordoned["metadata"]["annotations"][nodes.EXCLUDED_BY_ANNOTATION])["cordoned"] is False


def test_lifting_removes_only_ours() -> None:
    ours = {"key": nodes.TAINT_KEY, "value": "w", "effect": "NoExecute"}
    record = {"workload": "w", "reason": "trainguard: x", "at": 1.0, "cordoned": False}
    patch = nodes.lift_patch(a_node(taints=[PERSON, ours], unschedulable=True, record=record))
    assert patch is not None
    assert patch["spec"] == {"taints": [PERSON]}  # the person's cordon stays: no unschedulable key
    assert patch["metadata"]["annotations"] == {nodes.EXCLUDED_BY_ANNOTATION: None}
    with pytest.raises(base.SchedulerError, match="not excluded by trainguard"):
        nodes.lift_patch(a_node(taints=[PERSON], unschedulable=True))
    with pytest.raises(base.SchedulerError, match="without our"):
        nodes.lift_patch(a_node(taints=[ours]))


def test_node_snapshot_in_the_schedulers_words() -> None:
    record = {"workload": "w", "reason": "trainguard: x", "at": 1.0, "cordoned": True}
    excluded = nodes.snapshot(a_node(taints=[{"key": nodes.TAINT_KEY}], unschedulable=True, record=record))
    assert excluded.drained and not excluded.usable and excluded.reason == "trainguard: x"
    assert nodes.snapshot(a_node()).usable
    assert not nodes.snapshot(a_node(ready=False)).usable


def test_taint_value_is_a_label_value() -> None:
    long = "k8s/" + "n" * 60 + "/JobSet/" + "x" * 60
    value = nodes.taint_value(long)
    assert len(value) <= 63 and value == nodes.taint_value(long) and value != nodes.taint_value(long + "y")


def test_a_kubernetes_workloads_recovery_lives_beside_it_and_is_owned_by_it() -> None:
    wid = "k8s/ml/JobSet/train"
    job = common.snapshot(jobset.KIND, a_jobset(), PODS, [])
    view = status.WorkloadView(workload=wid, job=job, policy_name="gpu", mode=vocab.Mode.ACTION)
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train", "uid": "u-1"}
    obj = status.desired_object(view, "trainguard-system", owner)
    assert obj["metadata"]["namespace"] == "ml" and obj["metadata"]["name"] == "jobset-train"
    assert obj["metadata"]["ownerReferences"] == [{**owner, "controller": False, "blockOwnerDeletion": False}]
    assert obj["spec"]["workload"] == {"kind": "JobSet", "cluster": "", "id": "train"}
    assert recovery.parse(obj).spec.workload.kind is recovery.WorkloadKind.JOBSET
    assert status.namespace_of(wid, "trainguard-system") == "ml"
    assert status.namespace_of("slurm/c/42", "trainguard-system") == "trainguard-system"


def test_fewest_nodes_packs_the_pods_by_their_gpu_requests() -> None:
    def pod(gpus: str) -> dict[str, Any]:
        return {"spec": {"containers": [{"resources": {"limits": {common.GPU: gpus}}}]}}

    eight = {"status": {"allocatable": {common.GPU: "8"}}}
    assert common.min_nodes([pod("4")] * 4, [eight] * 4) == 2
    assert common.min_nodes([pod("8")] * 4, [eight] * 4) == 4
    assert common.min_nodes([{"spec": {"containers": [{}]}}], [eight]) == 1
    assert common.min_nodes([pod("4")], [{"status": {}}]) is None


def a_ptj_pod(name: str, uid: str, *, phase: str = "Running", exit_code: int | None = None,
              restarts: int = 0, kind: str = "worker") -> dict[str, Any]:
    state: dict[str, Any] = {"terminated": {"exitCode": exit_code, "reason": "Error"}} if exit_code else {
        "running": {}}
    return {"metadata": {"name": name, "uid": uid, "namespace": "ml",
                         "labels": {pytorchjob.NAME_LABEL: "ptj", pytorchjob.REPLICA_TYPE_LABEL: kind,
                                    pytorchjob.REPLICA_INDEX_LABEL: name[-1]}},
            "spec": {"nodeName": "n1"},
            "status": {"phase": phase, "containerStatuses": [{"name": "pytorch", "restartCount": restarts,
                                                              "state": state}]}}


def test_a_pytorchjob_pod_recreated_after_its_failure_is_a_new_attempt_and_our_own_restart_counts_once() -> None:
    """The training-operator re-creates a failed Worker under the same name (restartPolicy ExitCode):
    a new uid after a failed predecessor is a restart of its own, so the attempt moves past the one
    that failed and the executor's restart step sees it already in effect (no second restart).
    Pods our suspend/resume replaces count once, through our annotation."""
    obj = {"metadata": {"name": "ptj", "namespace": "ml", "annotations": {"trainguard.dev/policy": "gpu"}},
           "spec": {"pytorchReplicaSpecs": {"Master": {"restartPolicy": "ExitCode"},
                                            "Worker": {"restartPolicy": "ExitCode"}}}}
    book = pytorchjob.Replacements()
    for pod in (a_ptj_pod("ptj-master-0", "m1", kind="master"), a_ptj_pod("ptj-worker-0", "w0"),
                a_ptj_pod("ptj-worker-1", "w1")):
        assert not book.observe(pod)
    assert common.snapshot(pytorchjob.KIND, obj, [], [], replaced=book.count).attempt == 0
    failed = a_ptj_pod("ptj-worker-1", "w1", phase="Failed", exit_code=137)
    assert pytorchjob.restarts_failed_pod(obj, failed)
    assert not pytorchjob.restarts_failed_pod(obj, a_ptj_pod("ptj-worker-1", "w1", phase="Failed", exit_code=1))
    assert not book.observe(failed) and book.count == 0
    assert book.observe(a_ptj_pod("ptj-worker-1", "w1b"))  # same name, new uid: the operator's restart
    assert not book.observe(a_ptj_pod("ptj-worker-1", "w1b"))  # seen again: nothing new
    pods = [a_ptj_pod("ptj-master-0", "m1", kind="master"), a_ptj_pod("ptj-worker-1", "w1b")]
    assert common.snapshot(pytorchjob.KIND, obj, pods, [], replaced=book.count).attempt == 1
    # our restart: suspend (counted by the annotation, failures forgotten), resume makes new pods
    assert not book.observe(a_ptj_pod("ptj-worker-0", "w0", phase="Failed", exit_code=137))
    book.forget_failures()
    for pod in (a_ptj_pod("ptj-master-0", "m2", kind="master"), a_ptj_pod("ptj-worker-0", "w0c"),
                a_ptj_pod("ptj-worker-1", "w1c")):
        assert not book.observe(pod)
    ours = {**obj, "metadata": {**obj["metadata"], "annotations": {"trainguard.dev/policy": "gpu",
                                                                    common.RESTARTS_ANNOTATION: "1"}}}
    assert common.snapshot(pytorchjob.KIND, ours, [], [], replaced=book.count).attempt == 2
    # an in-place restart (OnFailure) shows in restartCount; a lastState failure is no pending restart
    in_place = a_ptj_pod("ptj-worker-0", "w0c", restarts=1)
    in_place["status"]["containerStatuses"][0]["lastState"] = {"terminated": {"exitCode": 1}}
    assert not pytorchjob.restarts_failed_pod(obj, in_place)
    assert common.snapshot(pytorchjob.KIND, ours, [in_place], [], replaced=book.count).attempt == 3


def test_a_failed_pytorchjob_pod_deleted_and_not_yet_re_created_awaits_its_successor() -> None:
    """The training-operator deletes a failed pod, then creates its successor: in between, the pods
    listed show no failure, and only the failed version the book kept tells that the workload's own
    restart is on the way (our restart step must wait for it, not restart on top of it)."""
    book = pytorchjob.Replacements()
    master, worker = a_ptj_pod("ptj-master-0", "m1", kind="master"), a_ptj_pod("ptj-worker-0", "w0")
    for pod in (master, worker):
        book.observe(pod)
    assert book.awaiting_successor([master]) == []  # gone, but never seen failed: nothing on its way
    failed = a_ptj_pod("ptj-worker-0", "w0", phase="Failed", exit_code=137)
    book.observe(failed)
    assert book.awaiting_successor([master, failed]) == []  # still listed: judged as it is
    assert book.awaiting_successor([master]) == [failed]  # deleted, its successor not created yet
    book.observe(a_ptj_pod("ptj-worker-0", "w0b"))
    assert book.awaiting_successor([master]) == [] and book.count == 1
    book.observe(a_ptj_pod("ptj-worker-0", "w0b", phase="Failed", exit_code=137))
    book.forget_failures()  # our suspend replaces every pod
    assert book.awaiting_successor([master]) == []


def test_a_pytorchjob_pod_failing_after_our_suspend_is_part_of_our_restart_not_a_second_one() -> None:
    """Our restart of a running PyTorchJob (a fatal Xid read before its rank died) races the kill:
    the Worker fails after our suspend, the training-operator may even re-create it before it sees
    the suspend, then our resume makes every pod anew. That is one restart, counted by our
    annotation, never a second one of its own (which would move the attempt past the one our resume
    starts, and take our own suspend for somebody else's)."""
    book = pytorchjob.Replacements()
    for pod in (a_ptj_pod("ptj-master-0", "m1", kind="master"), a_ptj_pod("ptj-worker-1", "w1")):
        book.observe(pod)
    book.forget_failures()  # our suspend
    assert not book.observe(a_ptj_pod("ptj-worker-1", "w1", phase="Failed", exit_code=137))
    assert book.awaiting_successor([]) == []  # no restart of its own on the way
    assert not book.observe(a_ptj_pod("ptj-worker-1", "w1b"))  # re-created before it saw the suspend
    assert not book.observe(a_ptj_pod("ptj-worker-1", "w1c"))  # our resume
    assert book.count == 0
    assert not book.observe(a_ptj_pod("ptj-worker-1", "w1c", phase="Failed", exit_code=137))
    assert book.observe(a_ptj_pod("ptj-worker-1", "w1d"))  # a later failure of a new pod is its own again
    assert book.count == 1


def test_the_failed_pod_versions_are_kept_for_the_pod_log_book_retired_ones_too_and_bounded() -> None:
    book = pytorchjob.Replacements()
    book.observe(a_ptj_pod("ptj-worker-0", "w0"))
    failed = a_ptj_pod("ptj-worker-0", "w0", phase="Failed", exit_code=137)
    book.observe(failed)
    book.observe(a_ptj_pod("ptj-worker-0", "w0b"))  # re-created: the failed version stays for its ending line
    assert list(book.ended.values()) == [failed]
    book.forget_failures()  # our suspend
    killed = a_ptj_pod("ptj-worker-0", "w0b", phase="Failed", exit_code=137)
    book.observe(killed)  # a pod our suspend takes away, killed on its way out: its ending is the old attempt's
    assert list(book.ended.values()) == [failed, killed]
    for i in range(pytorchjob.ENDED_KEPT + 5):
        book.observe(a_ptj_pod("ptj-worker-1", f"x{i}", phase="Failed", exit_code=1))
    assert len(book.ended) == pytorchjob.ENDED_KEPT and "x0" not in book.ended
