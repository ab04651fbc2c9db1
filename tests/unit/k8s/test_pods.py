"""A workload's pods read from their JSON (k8s/pods.py): target path, rank, node, endings as lines."""

from __future__ import annotations

from typing import Any

from trainguard.k8s import pods


def _pod(name: str, labels: dict[str, str], *, node: str = "kwok-node-1", status: dict[str, Any] | None = None,
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": labels, "annotations": annotations or {}},
            "spec": {"nodeName": node, "containers": [{"name": "trainer"}]}, "status": status or {}}


def test_path_names_the_workload_and_its_pod_selector() -> None:
    js = pods.parse_path("k8s://team-a/JobSet/train")
    assert js == pods.Target("team-a", "JobSet", "train")
    assert js.selector == "jobset.sigs.k8s.io/jobset-name=train"
    assert js.path == "k8s://team-a/JobSet/train"
    pt = pods.parse_path("k8s://ml/PyTorchJob/bert")
    assert pt is not None and pt.selector == "training.kubeflow.org/job-name=bert"
    for bad in ("/shared/out.log", "k8s://ns/Deployment/x", "k8s://ns/JobSet", "k8s://ns//x", "k8s://a/JobSet/b/c"):
        assert pods.parse_path(bad) is None


def test_jobset_rank_follows_replicated_jobs_job_index_and_completion_index() -> None:
    jobset = {"spec": {"replicatedJobs": [
        {"name": "leader", "replicas": 1, "template": {"spec": {"parallelism": 1, "completions": 1}}},
        {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 2, "completions": 2}}},
    ]}}
    layout = pods.layout_of("JobSet", jobset)
    assert layout.replicated_jobs == (("leader", 1, 1), ("workers", 2, 2))

    def labels(rj: str, index: int, completion: int) -> dict[str, str]:
        return {pods.JOBSET_NAME: "train", pods.JOBSET_REPLICATED_JOB: rj, pods.JOBSET_JOB_INDEX: str(index),
                pods.COMPLETION_INDEX: str(completion)}

    assert pods.rank_of("JobSet", _pod("l", labels("leader", 0, 0)), layout) == 0
    assert pods.rank_of("JobSet", _pod("w", labels("workers", 0, 1)), layout) == 2
    assert pods.rank_of("JobSet", _pod("w", labels("workers", 1, 0)), layout) == 3
    assert pods.rank_of("JobSet", _pod("w", labels("workers", 1, 1)), layout) == 4
    assert pods.rank_of("JobSet", _pod("x", labels("other", 0, 0)), layout) is None
    # without the spec: a pod of a one-pod (non-indexed) job has its job's global index
    alone = {pods.JOBSET_GLOBAL_INDEX: "3", pods.JOBSET_REPLICATED_JOB: "workers", pods.JOBSET_JOB_INDEX: "2"}
    assert pods.rank_of("JobSet", _pod("w", alone), None) == 3
    assert pods.rank_of("JobSet", _pod("w", {**alone, pods.COMPLETION_INDEX: "1"}), None) is None


def test_pytorchjob_rank_is_master_zero_then_workers() -> None:
    spec = {"spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 2}}}}
    layout = pods.layout_of("PyTorchJob", spec)
    master = {pods.PYTORCH_REPLICA_TYPE: "master", pods.PYTORCH_REPLICA_INDEX: "0"}
    worker = {pods.PYTORCH_REPLICA_TYPE: "worker", pods.PYTORCH_REPLICA_INDEX: "1"}
    assert pods.rank_of("PyTorchJob", _pod("m", master), layout) == 0
    assert pods.rank_of("PyTorchJob", _pod("w", worker), layout) == 2
    workers_only = pods.layout_of("PyTorchJob", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 4}}}})
    assert pods.rank_of("PyTorchJob", _pod("w", worker), workers_only) == 1
    assert pods.rank_of("PyTorchJob", _pod("x", {pods.PYTORCH_REPLICA_TYPE: "worker"}), layout) is None


def _terminated(**term: Any) -> dict[str, Any]:
    return {"phase": "Failed", "containerStatuses": [{"name": "trainer", "restartCount": 0,
                                                       "state": {"terminated": term}}]}


def test_a_failed_container_is_one_line_with_reason_exit_code_and_message() -> None:
    pod = _pod("train-w-0-1-abcde", {}, node="kwok-node-2", status=_terminated(
        exitCode=137, reason="OOMKilled", message="memory\nlimit", finishedAt="2026-12-01T20:00:05Z",
        containerID="containerd://abc"))
    (ending,) = pods.termination_lines(pod, now_ns=0)
    assert ending.text == ("trainguard: pod train-w-0-1-abcde container trainer on kwok-node-2 ended: "
                           "reason=OOMKilled exitCode=137 signal=SIGKILL message=memory limit")
    assert ending.ns == pods.parse_time_ns("2026-12-01T20:00:05.999999999Z")
    assert ending.key == pods.termination_lines(pod, now_ns=12345)[0].key  # stable: emitted once


def test_successful_and_running_containers_give_no_line_and_pod_reasons_do() -> None:
    ok = _pod("p", {}, status=_terminated(exitCode=0, reason="Completed", finishedAt="2026-12-01T20:00:05Z"))
    assert pods.termination_lines(ok, now_ns=0) == []
    running = _pod("p", {}, status={"phase": "Running", "containerStatuses": [
        {"name": "trainer", "state": {"running": {}}, "lastState": {"terminated": {
            "exitCode": 139, "reason": "Error", "finishedAt": "2026-12-01T20:00:01Z"}}}]})
    (restarted,) = pods.termination_lines(running, now_ns=0)
    assert "reason=Error exitCode=139" in restarted.text
    evicted = _pod("p", {}, node="kwok-node-3", status={
        "phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory.",
        "startTime": "2026-12-01T20:00:00Z"})
    (line,) = pods.termination_lines(evicted, now_ns=0)
    assert line.text == ("trainguard: pod p on kwok-node-3 failed: reason=Evicted "
                         "message=The node was low on resource: memory.")


def test_long_messages_are_cut() -> None:
    pod = _pod("p", {}, status=_terminated(exitCode=1, reason="Error", message="x" * 5000))
    (ending,) = pods.termination_lines(pod, now_ns=7)
    assert len(ending.text) < 700 and ending.text.endswith(" ...")
    assert ending.ns == 7  # no finish time: the time it was seen


def test_times_parse_with_and_without_fractions() -> None:
    assert pods.parse_time_ns("2026-12-01T20:00:00Z") == 1796155200 * pods.NS
    assert pods.parse_time_ns("2026-12-01T20:00:00.000000042Z") == 1796155200 * pods.NS + 42
    assert pods.parse_time_ns("2026-12-01T21:00:00.5+01:00") == 1796155200 * pods.NS + 500_000_000
    assert pods.parse_time_ns("yesterday") is None
    assert pods.format_time(1796155200 * pods.NS + 999) == "2026-12-01T20:00:00Z"


def test_kubernetes_job_ids_are_told_from_slurm_ones() -> None:
    assert pods.is_workload_id("k8s/team/JobSet/train")
    for other in ("4242", "4242_7", "k8s/team/JobSet", "k8s//JobSet/x", "cluster-a/4242"):
        assert not pods.is_workload_id(other)
