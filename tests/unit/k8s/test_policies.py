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
    assert kinds == {condition.ACCEPTED: true, condition.INVALID: false}
    later = policies.status_of(entry, (True, policies.VALID, "in force"), 3, st, T0 + datetime.timedelta(hours=1))
    assert later == st
    parsed = policies.parse_status(st.model_dump(mode="json", by_alias=True))
    assert parsed == st
