"""policy.loader.PolicySet.route: a job that names no policy gets the most specific policy whose
selector covers it; a named policy is honoured only within its selector; ties are broken by
``selector.priority`` or recorded as ambiguous."""

from __future__ import annotations

from typing import Any

from trainguard.model import workloads
from trainguard.policy import loader


def _policies(*docs: str) -> loader.PolicySet:
    return loader.parse_text("\n---\n".join(docs))


def _policy(name: str, selector: str = "{}", mode: str = "Monitor") -> str:
    return (f"apiVersion: trainguard.dev/v1alpha1\nkind: RecoveryPolicy\nmetadata: {{name: {name}}}\n"
            f"spec: {{mode: {mode}, selector: {selector}}}")


def _job(**fields: Any) -> workloads.JobSnapshot:
    base: dict[str, Any] = {"workload": "slurm/c/1", "job_id": "1", "state": workloads.JobState.RUNNING,
                            "partition": "debug", "account": "ml", "user": "alice", "qos": "normal"}
    return workloads.JobSnapshot.model_validate({**base, **fields})


POLICIES = _policies(
    _policy("debug", "{partitions: [debug]}"),
    _policy("ml-debug", "{partitions: [debug], accounts: [ml]}"),
    _policy("alice", "{users: [alice], qos: [high]}"),
    _policy("team-only"),  # no selector: reachable only by name
)


def test_a_job_that_names_no_policy_is_covered_by_a_matching_selector_without_a_default() -> None:
    policy, route = POLICIES.route(None, _job(account="physics"))
    assert policy is not None and policy.name == "debug"
    assert route.policy == "debug" and not route.explicit
    assert "most specific selector covering the job (partition 'debug'; specificity 1)" in route.reason
    assert [c.policy for c in route.candidates] == ["debug"]


def test_the_most_specific_selector_wins() -> None:
    policy, route = POLICIES.route(None, _job())
    assert policy is not None and policy.name == "ml-debug"
    assert "partition 'debug', account 'ml'; specificity 2" in route.reason
    assert [(c.policy, c.specificity) for c in route.candidates] == [("ml-debug", 2), ("debug", 1)]


def test_an_equal_tie_is_ambiguous_and_covers_nothing_unless_priority_breaks_it() -> None:
    policy, route = POLICIES.route(None, _job(qos="high"))
    assert policy is None and route.policy is None
    assert route.reason.startswith("ambiguous: 'alice', 'ml-debug' cover the job equally (specificity 2, priority 0)")
    assert {c.policy for c in route.candidates} == {"alice", "ml-debug", "debug"}
    ranked = _policies(
        _policy("ml-debug", "{partitions: [debug], accounts: [ml]}"),
        _policy("alice", "{users: [alice], qos: [high], priority: 10}"),
    )
    policy, route = ranked.route(None, _job(qos="high"))
    assert policy is not None and policy.name == "alice"


def test_a_policy_without_a_selector_is_reached_only_by_name_except_default() -> None:
    policy, route = POLICIES.route(None, _job(partition="gpu", user="bob"))
    assert policy is None
    assert route.reason == ("no policy's selector covers the job (partition 'gpu', account 'ml', user 'bob', "
                            "QOS 'normal') and no policy is named 'default'")
    with_default = _policies(_policy("default"), _policy("debug", "{partitions: [debug]}"))
    policy, route = with_default.route(None, _job(partition="gpu"))
    assert policy is not None and policy.name == "default"
    assert route.reason == "the 'default' policy: no selector covers the job more specifically"
    policy, _ = with_default.route(None, _job())
    assert policy is not None and policy.name == "debug"


def test_a_named_policy_wins_but_never_outside_its_selector() -> None:
    policy, route = POLICIES.route("team-only", _job())
    assert policy is not None and policy.name == "team-only"
    assert route.explicit and route.reason == "named by the job (policy=team-only)"
    policy, route = POLICIES.route("debug", _job())  # less specific than ml-debug, but named
    assert policy is not None and policy.name == "debug"
    policy, route = POLICIES.route("ml-debug", _job(account="physics"))
    assert policy is None and route.explicit
    assert route.reason == ("the job names policy 'ml-debug', but that policy's selector does not cover "
                            "account 'physics'")
    policy, route = POLICIES.route("nosuch", _job())
    assert policy is None
    assert route.reason.startswith("no RecoveryPolicy named 'nosuch' (known: debug, ml-debug, alice, team-only)")


def test_every_dimension_is_matched() -> None:
    sets = {
        "partitions": ("{partitions: [gpu]}", {"partition": "gpu"}),
        "accounts": ("{accounts: [ml]}", {"account": "ml"}),
        "users": ("{users: [alice]}", {"user": "alice"}),
        "qos": ("{qos: [high]}", {"qos": "high"}),
        "namespaces": ("{namespaces: [team-a]}", {"namespace": "team-a"}),
        "labels": ("{labels: {team: a, tier: gold}}", {"labels": {"team": "a", "tier": "gold", "x": "y"}}),
    }
    for dimension, (selector, fields) in sets.items():
        policies = _policies(_policy("p", selector))
        policy, route = policies.route(None, _job(**{**{"partition": "x", "account": "", "user": "", "qos": ""},
                                                     **fields}))
        assert policy is not None, f"{dimension}: {route.reason}"
        missed, route = policies.route(None, _job(partition="y", account="other", user="bob", qos="low",
                                                  namespace="team-b", labels={"team": "a"}))
        assert missed is None, dimension


def test_each_label_key_counts_as_one_dimension() -> None:
    policies = _policies(_policy("two-labels", "{labels: {team: a, tier: gold}}"),
                         _policy("ns", "{namespaces: [team-a]}"))
    policy, route = policies.route(None, _job(namespace="team-a", labels={"team": "a", "tier": "gold"}))
    assert policy is not None and policy.name == "two-labels"
    assert [(c.policy, c.specificity) for c in route.candidates] == [("two-labels", 2), ("ns", 1)]


def test_a_job_that_may_run_in_several_partitions_needs_all_of_them_covered() -> None:
    policies = _policies(_policy("gpu", "{partitions: [gpu]}"), _policy("both", "{partitions: [gpu, cpu]}"))
    policy, _ = policies.route(None, _job(partition="gpu,cpu"))
    assert policy is not None and policy.name == "both"
    policy, route = policies.route(None, _job(partition="gpu"))
    assert policy is None and route.reason.startswith("ambiguous: 'both', 'gpu'")  # one dimension each


def test_select_keeps_its_meaning_for_a_named_policy() -> None:
    policy, why = POLICIES.select("debug", partition="debug")
    assert policy is not None and why == "named by the job (policy=debug)"
    policy, why = POLICIES.select("debug", partition="gpu")
    assert policy is None and "does not cover partition 'gpu'" in why
