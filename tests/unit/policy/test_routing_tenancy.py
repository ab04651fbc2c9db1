"""policy.loader.PolicySet.route with namespaced policies (the operator's RecoveryPolicy objects): a
policy in the operator's namespace (``home``) may cover every namespace and Slurm jobs; a policy of any
other namespace covers only Kubernetes workloads of its own namespace, however specific its selector,
and even when a job names it. Policy files (``home`` None) route as before, namespace or not."""

from __future__ import annotations

from typing import Any

from trainguard.model import vocab, workloads
from trainguard.policy import loader
from trainguard.policy import model as policy_model

HOME = "trainguard-system"


def _policy(namespace: str | None, name: str, selector: dict[str, Any] | None = None,
            mode: str = "Monitor") -> policy_model.RecoveryPolicy:
    return policy_model.RecoveryPolicy.model_validate({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"mode": mode, "selector": selector or {}},
    })


def _k8s(namespace: str, **fields: Any) -> workloads.JobSnapshot:
    return workloads.JobSnapshot.model_validate({
        "workload": f"k8s/{namespace}/JobSet/train", "job_id": f"k8s/{namespace}/JobSet/train",
        "state": workloads.JobState.RUNNING, "namespace": namespace, "labels": {"team": "vision"}, **fields})


def _slurm(**fields: Any) -> workloads.JobSnapshot:
    return workloads.JobSnapshot.model_validate({
        "workload": "slurm/c/1", "job_id": "1", "state": workloads.JobState.RUNNING, "partition": "gpu", **fields})


POLICIES = (
    _policy(HOME, "default"),
    _policy(HOME, "vision", {"labels": {"team": "vision"}}),
    _policy("team-b", "grab", {"labels": {"team": "vision"}, "namespaces": ["team-a", "team-b"]}, mode="Action"),
    _policy("team-b", "b-gpu", {"partitions": ["gpu"], "labels": {"team": "vision"}}, mode="Action"),
    _policy("team-a", "a-own", {"namespaces": ["team-a"]}),
)
OPERATOR = loader.PolicySet(POLICIES, home=HOME)


def test_a_more_specific_tenant_policy_does_not_capture_another_namespaces_workload() -> None:
    policy, route = OPERATOR.route(None, _k8s("team-a", labels={}))
    assert policy is not None and policy.metadata.name == "a-own"  # its own tenant policy, not team-b's
    policy, route = OPERATOR.route(None, _k8s("team-a", labels={"team": "vision"}))
    # team-b's 'grab' (specificity 2, Action) is out; the admin's 'vision' and team-a's own 'a-own' tie at 1
    assert policy is None and route.reason.startswith("ambiguous: 'a-own', 'vision'")
    assert "not eligible (tenant policies of namespaces other than 'team-a'): team-b/grab" in route.reason
    alone = loader.PolicySet(tuple(p for p in POLICIES if p.metadata.namespace != "team-a"), home=HOME)
    policy, route = alone.route(None, _k8s("team-a"))
    assert policy is not None and policy.name == "vision" and policy.spec.mode is vocab.Mode.MONITOR
    assert route.policy == "vision" and route.namespace == HOME
    assert [c.policy for c in route.candidates] == ["vision", "default"]
    assert route.reason.endswith("; not eligible (tenant policies of namespaces other than 'team-a'): team-b/grab")


def test_a_tenant_policy_covers_its_own_namespace_and_the_admin_policy_every_namespace() -> None:
    policy, route = OPERATOR.route(None, _k8s("team-b"))
    assert policy is not None and policy.name == "grab" and route.namespace == "team-b"
    policy, route = OPERATOR.route(None, _k8s("team-c", labels={}))
    assert policy is not None and policy.name == "default" and route.namespace == HOME
    policy, route = OPERATOR.route(None, _k8s(HOME))
    assert policy is not None and policy.name == "vision"


def test_a_slurm_job_is_covered_only_by_admin_policies() -> None:
    policy, route = OPERATOR.route(None, _slurm(labels={"team": "vision"}))
    assert policy is not None and policy.name == "vision" and route.namespace == HOME
    assert "not eligible (tenant policies, which cover no Slurm job): team-b/b-gpu" in route.reason
    policy, route = OPERATOR.route("b-gpu", _slurm(labels={"team": "vision"}))
    assert policy is None and route.explicit
    assert "RecoveryPolicy team-b/b-gpu is a tenant policy" in route.reason
    assert "without a namespace (a Slurm job)" in route.reason


def test_a_workload_may_name_a_policy_of_its_own_namespace_or_the_admins_but_not_a_third() -> None:
    policy, route = OPERATOR.route("a-own", _k8s("team-a"))
    assert policy is not None and route.explicit and route.namespace == "team-a"
    policy, route = OPERATOR.route("vision", _k8s("team-a"))
    assert policy is not None and route.policy == "vision" and route.namespace == HOME
    policy, route = OPERATOR.route("grab", _k8s("team-a"))
    assert policy is None and route.policy is None and route.explicit
    assert route.reason == (
        "the job names policy 'grab', but RecoveryPolicy team-b/grab is a tenant policy: it covers only "
        "Kubernetes workloads of namespace 'team-b', not a workload of namespace 'team-a'; a policy for every "
        f"namespace belongs in the operator's namespace {HOME!r}")


def test_policy_files_are_not_namespaced_and_route_as_before() -> None:
    files = loader.PolicySet(POLICIES)  # trainguard run: home None, metadata.namespace plays no part
    policy, route = files.route(None, _k8s("team-a"))
    assert policy is not None and policy.name == "grab" and route.namespace is None
    policy, route = files.route("b-gpu", _slurm(labels={"team": "vision"}))
    assert policy is not None and route.explicit
    assert files.tenant_of(POLICIES[2]) is None and OPERATOR.tenant_of(POLICIES[2]) == "team-b"
    assert OPERATOR.tenant_of(_policy(None, "x")) is None
