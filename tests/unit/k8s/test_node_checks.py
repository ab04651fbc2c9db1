"""The validation check on Kubernetes read from and written as JSON (k8s/kubejobs/node_checks.py): the taint that
stands for Slurm's reservation, the Job pinned to the node, the verdict from the Job and its pod.

The calls against a real apiserver and the real Job controller are in
``tests/integration/kube_cluster/test_validation_kube.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client as kclient

from trainguard.act import ports
from trainguard.k8s.kubejobs import node_checks, nodes, scheduler
from trainguard.model import checks

pytestmark = pytest.mark.unit


def _node(taints: list[dict[str, str]] | None = None, *, gpus: str | None = "8") -> dict[str, Any]:
    status = {"allocatable": {"cpu": "32", "nvidia.com/gpu": gpus}} if gpus is not None else {}
    return {"metadata": {"name": "kwok-node-3", "resourceVersion": "41"},
            "spec": {"unschedulable": True, "taints": taints or []}, "status": status}


def _job(*conditions: tuple[str, str]) -> dict[str, Any]:
    return {"metadata": {"labels": {node_checks.CHECK_LABEL: "abc"}},
            "status": {"conditions": [{"type": t, "status": "True", "reason": r} for t, r in conditions]}}


def _pod(*, terminated: dict[str, Any] | None = None, waiting: str | None = None,
         unscheduled: str | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {}
    if terminated is not None:
        state["terminated"] = terminated
    if waiting is not None:
        state["waiting"] = {"reason": waiting}
    status: dict[str, Any] = {"phase": "Pending" if terminated is None else "Failed",
                              "containerStatuses": [{"name": node_checks.CONTAINER, "state": state}] if state else []}
    if unscheduled is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": unscheduled}]
    return {"metadata": {"name": "trainguard-check-abc-x"}, "status": status}


async def test_the_kube_scheduler_is_the_engines_node_validator() -> None:
    """``engine.recovery`` hands the scheduler to the undrainer as validator when it is a ``NodeValidator``."""
    kube = scheduler.KubeScheduler(kclient.ApiClient(), check_namespace="ops")
    try:
        assert isinstance(kube, ports.NodeValidator)
        assert kube.node_checks.namespace == "ops"
    finally:
        await kube.close()


def test_the_validating_taint_is_added_once_and_removed_alone() -> None:
    theirs = {"key": "site.example/maintenance", "value": "x", "effect": "NoSchedule"}
    ours = {"key": nodes.TAINT_KEY, "value": "w", "effect": "NoExecute"}
    patch = node_checks.reserve_patch(_node([theirs, ours]))
    assert patch is not None
    assert patch["metadata"] == {"resourceVersion": "41"}  # a concurrent change is a 409, re-read
    assert patch["spec"]["taints"] == [theirs, ours, {"key": node_checks.VALIDATING_TAINT, "value": "check",
                                                      "effect": "NoSchedule"}]
    reserved = _node(patch["spec"]["taints"])
    assert node_checks.reserve_patch(reserved) is None  # already there: nothing to do
    lifted = node_checks.unreserve_patch(reserved)
    assert lifted is not None and lifted["spec"]["taints"] == [theirs, ours]
    assert node_checks.unreserve_patch(_node([theirs])) is None
    only = node_checks.unreserve_patch(_node([patch["spec"]["taints"][-1]]))
    assert only is not None and only["spec"]["taints"] is None  # the list removed, not left empty by merge


def test_the_check_job_is_pinned_to_the_node_tolerates_our_taints_and_takes_every_gpu() -> None:
    job = node_checks.check_job(_node(), ["/usr/local/bin/gpu-check", "--level", "2"], tag="abc", namespace="ops",
                                seconds=1800, workdir="/tmp", image="site/gpu-check:1")
    assert job["metadata"]["name"] == "trainguard-check-abc" and job["metadata"]["namespace"] == "ops"
    assert job["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "trainguard", node_checks.CHECK_LABEL: "abc"}
    spec = job["spec"]
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"]) == (0, 1800)
    pod = spec["template"]["spec"]
    assert spec["template"]["metadata"]["labels"][node_checks.CHECK_LABEL] == "abc"  # find_check and the pod list
    assert pod["restartPolicy"] == "Never"
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["kwok-node-3"]}]}]
    assert {t["key"] for t in pod["tolerations"]} == {node_checks.VALIDATING_TAINT, nodes.TAINT_KEY,
                                                      "node.kubernetes.io/unschedulable"}
    [container] = pod["containers"]
    assert container["command"] == ["/usr/local/bin/gpu-check", "--level", "2"]  # argv, no shell
    assert "args" not in container and container["image"] == "site/gpu-check:1"
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
    bare = node_checks.check_job(_node(gpus=None), ["/bin/check"], tag="abc", namespace="ops", seconds=60,
                                 workdir="/tmp", image="i")
    assert "resources" not in bare["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize(("job", "pod", "phase", "code"), [
    (_job(("Complete", "")), _pod(terminated={"exitCode": 0}), checks.CheckPhase.PASSED, 0),
    (_job(("Failed", "BackoffLimitExceeded")), _pod(terminated={"exitCode": 3}), checks.CheckPhase.FAILED, 3),
    (_job(("Failed", "DeadlineExceeded")), _pod(terminated={"exitCode": 137}), checks.CheckPhase.NO_VERDICT, 137),
    (_job(("Failed", "BackoffLimitExceeded")), None, checks.CheckPhase.NO_VERDICT, None),
    (_job(), _pod(waiting="ImagePullBackOff"), checks.CheckPhase.WAITING, None),
    (_job(), None, checks.CheckPhase.WAITING, None),
])
def test_the_verdict_rests_on_the_jobs_end_and_the_containers_exit_code(
        job: dict[str, Any], pod: dict[str, Any] | None, phase: checks.CheckPhase, code: int | None) -> None:
    status = node_checks.verdict(job, pod)
    assert (status.phase, status.exit_code) == (phase, code)


def test_a_check_that_waits_says_why_for_the_evidence_of_its_timeout() -> None:
    status = node_checks.verdict(_job(), _pod(unscheduled="0/4 nodes are available: 1 Insufficient nvidia.com/gpu"))
    assert status.phase is checks.CheckPhase.WAITING
    assert status.state.startswith("Pending, not scheduled (Unschedulable: 0/4 nodes are available")
    assert node_checks.verdict(_job(), _pod(waiting="ErrImagePull")).state == "Pending (ErrImagePull)"
