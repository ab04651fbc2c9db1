"""RecoveryPolicy objects -> verdicts, PolicySet and status (k8s/policies.py): pure."""

from __future__ import annotations

import datetime
from typing import Any

from trainguard.k8s import condition, policies
from trainguard.model import vocab

T0 = datetime.datetime(2026, 1, 31, 12, 0, tzinfo=datetime.UTC)


def obj(name: str, spec: dict[str, Any], namespace: str = "team-a", generation: int = 1) -> dict[str, Any]:
    return {"apiVersion": "trainguard.dev/v1alpha1", "kind": "RecoveryPolicy",
            "metadata": {"name": name, "namespace": namespace, "generation": generation, "resourceVersion": "7"},
            "spec": spec}


def test_valid_policy_is_accepted_and_in_the_policy_set() -> None:
    book = policies.PolicyBook()
    book.put(policies.read(obj("llm", {"mode": "Action"})))
    assert book.verdicts()[("team-a", "llm")][0] is True
    assert [p.spec.mode for p in book.policy_set().policies] == [vocab.Mode.ACTION]


def test_invalid_spec_is_rejected_with_the_field_path_and_kept_out_of_the_set() -> None:
    book = policies.PolicyBook()
    entry = policies.read(obj("bad", {"retries": {"maxRetries": -1}}))
    book.put(entry)
    accepted, reason, message = book.verdicts()[("team-a", "bad")]
    assert (accepted, reason) == (False, policies.VALIDATION_FAILED)
    assert "spec.retries.maxRetries" in message
    assert book.policy_set().policies == ()


def test_two_policies_selected_by_one_name_keep_the_first_key_whatever_the_order() -> None:
    first = policies.read(obj("llm", {}, namespace="team-a"))
    second = policies.read(obj("llm", {}, namespace="team-b"))
    for order in ([first, second], [second, first]):
        book = policies.PolicyBook()
        for entry in order:
            book.put(entry)
        verdicts = book.verdicts()
        assert verdicts[("team-a", "llm")][0] is True
        assert verdicts[("team-b", "llm")][:2] == (False, policies.DUPLICATE_NAME)
        assert len(book.policy_set().policies) == 1


def test_status_carries_conditions_generation_and_coverage_and_keeps_transition_times() -> None:
    entry = policies.read(obj("llm", {}, generation=4))
    st = policies.status_of(entry, (True, policies.VALID, "in force"), 3, None, T0)
    assert (st.observed_generation, st.covered_workloads) == (4, 3)
    kinds = {c.type: c.status for c in st.conditions}
    true, false = condition.ConditionStatus.TRUE, condition.ConditionStatus.FALSE
    assert kinds == {condition.ACCEPTED: true, condition.INVALID: false, condition.CONFLICTING: false,
                     condition.READY: true}
    later = policies.status_of(entry, (True, policies.VALID, "in force"), 3, st, T0 + datetime.timedelta(hours=1))
    assert later == st
    parsed = policies.parse_status(st.model_dump(mode="json", by_alias=True))
    assert parsed == st


def test_ready_mirrors_accepted_with_its_reason_and_generation() -> None:
    entry = policies.read(obj("llm", {}, generation=2))
    for verdict in ((True, policies.VALID, "in force"), (False, policies.DUPLICATE_NAME, "taken")):
        st = policies.status_of(entry, verdict, 0, None, T0)
        ready = next(c for c in st.conditions if c.type == condition.READY)
        assert (ready.status == condition.ConditionStatus.TRUE, ready.reason, ready.message) == verdict
        assert ready.observed_generation == st.observed_generation == 2


def made(name: str, namespace: str, created: str) -> policies.Entry:
    body = obj(name, {}, namespace=namespace)
    body["metadata"]["creationTimestamp"] = created
    return policies.read(body)


def test_a_name_clash_is_won_by_the_operators_namespace_then_by_the_oldest_policy() -> None:
    old_team = made("llm", "team-b", "2026-01-01T00:00:00Z")
    new_team = made("llm", "team-a", "2026-02-01T00:00:00Z")
    ours = made("llm", "trainguard-system", "2026-03-01T00:00:00Z")
    for entries in ([old_team, new_team], [new_team, old_team]):
        book = policies.PolicyBook(home="trainguard-system")
        for entry in entries:
            book.put(entry)
        verdicts = book.verdicts()
        assert verdicts[("team-b", "llm")][0] is True  # the oldest: a newer policy never takes its jobs
        assert verdicts[("team-a", "llm")][:2] == (False, policies.DUPLICATE_NAME)
        assert "team-b/llm" in verdicts[("team-a", "llm")][2]
        book.put(ours)
        verdicts = book.verdicts()
        assert [key for key, v in verdicts.items() if v[0]] == [("trainguard-system", "llm")]
        assert "operator's namespace" in verdicts[("team-b", "llm")][2]
        assert [(p.metadata.namespace, p.name) for p in book.policy_set().policies] == [("trainguard-system", "llm")]


def test_every_policy_of_a_clash_shows_conflicting_naming_the_winner_and_others_do_not() -> None:
    book = policies.PolicyBook(home="ops")
    for entry in (made("llm", "team-a", "2026-02-01T00:00:00Z"), made("llm", "team-b", "2026-01-01T00:00:00Z"),
                  made("solo", "team-a", "2026-01-01T00:00:00Z")):
        book.put(entry)
    verdicts, conflicts = book.verdicts(), book.conflicts()
    statuses = {key: policies.status_of(entry, verdicts[key], 0, None, T0, conflict=conflicts.get(key))
                for key, entry in book.entries.items()}

    def conflicting(key: tuple[str, str]) -> condition.Condition:
        return next(c for c in statuses[key].conditions if c.type == condition.CONFLICTING)

    for key in (("team-a", "llm"), ("team-b", "llm")):
        found = conflicting(key)
        assert (found.status, found.reason) == (condition.ConditionStatus.TRUE, policies.NAME_CLASH)
        assert "RecoveryPolicy team-b/llm is in force because it is the oldest" in found.message
    assert conflicting(("team-a", "solo")).status is condition.ConditionStatus.FALSE
    accepted = {key: next(c.status for c in st.conditions if c.type == condition.ACCEPTED)
                for key, st in statuses.items()}
    assert accepted[("team-a", "llm")] is condition.ConditionStatus.FALSE
    assert accepted[("team-b", "llm")] is condition.ConditionStatus.TRUE
