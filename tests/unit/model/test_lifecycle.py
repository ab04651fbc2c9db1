"""model.lifecycle: every allowed transition of a node, and the refused ones (nothing changes)."""

from __future__ import annotations

import itertools

import pytest

from trainguard.model import lifecycle

S = lifecycle.NodeState
E = lifecycle.NodeEvent


@pytest.mark.parametrize(("state", "event", "after"), [
    (S.IN_SERVICE, E.NAMED, S.SUSPECT),
    (S.SUSPECT, E.TAKEN_OUT, S.OUT_OF_SERVICE),
    (S.IN_SERVICE, E.TAKEN_OUT, S.OUT_OF_SERVICE),
    (S.OUT_OF_SERVICE, E.VALIDATION_STARTED, S.VALIDATING),
    (S.VALIDATING, E.VALIDATION_PASSED, S.VALIDATING),
    (S.VALIDATING, E.RESUMED, S.IN_SERVICE),
    (S.VALIDATING, E.VALIDATION_FAILED, S.HELD_FOR_REPAIR),
    (S.VALIDATING, E.VALIDATION_INCONCLUSIVE, S.OUT_OF_SERVICE),
    (S.OUT_OF_SERVICE, E.RESUMED, S.IN_SERVICE),
    (S.OUT_OF_SERVICE, E.REPEAT_OFFENDER, S.HELD_FOR_REPAIR),
    (S.OUT_OF_SERVICE, E.HELD, S.HELD_FOR_REPAIR),
    (S.SUSPECT, E.HELD, S.HELD_FOR_REPAIR),
    (S.VALIDATING, E.HELD, S.HELD_FOR_REPAIR),
    (S.HELD_FOR_REPAIR, E.CLEARED, S.OUT_OF_SERVICE),
    (S.HELD_FOR_REPAIR, E.TAKEN_OUT, S.HELD_FOR_REPAIR),
    (S.IN_SERVICE, E.SEEN_OTHER, S.OTHER),
    (S.OUT_OF_SERVICE, E.SEEN_OTHER, S.OTHER),
    (S.OTHER, E.SEEN_BACK, S.IN_SERVICE),
    (S.OUT_OF_SERVICE, E.SEEN_BACK, S.IN_SERVICE),
    (S.HELD_FOR_REPAIR, E.SEEN_BACK, S.IN_SERVICE),
    (S.OTHER, E.TAKEN_OUT, S.OUT_OF_SERVICE),
])
def test_each_allowed_transition_leads_where_the_lifecycle_says(
        state: lifecycle.NodeState, event: lifecycle.NodeEvent, after: lifecycle.NodeState) -> None:
    assert lifecycle.advance(state, event) is after


def test_the_whole_path_out_and_back_through_validation() -> None:
    state = S.IN_SERVICE
    path = []
    for event in (E.NAMED, E.TAKEN_OUT, E.VALIDATION_STARTED, E.VALIDATION_PASSED, E.RESUMED):
        state = lifecycle.advance(state, event)
        path.append(state)
    assert path == [S.SUSPECT, S.OUT_OF_SERVICE, S.VALIDATING, S.VALIDATING, S.IN_SERVICE]


@pytest.mark.parametrize(("state", "event"), [
    (S.HELD_FOR_REPAIR, E.RESUMED),          # only a person clears a node held for repair
    (S.IN_SERVICE, E.HELD),                  # we did not take it out: a person's hold has nothing to keep out
    (S.OTHER, E.HELD),                       # someone else's: never touched
    (S.OTHER, E.CLEARED),
    (S.OTHER, E.RESUMED),
    (S.OTHER, E.VALIDATION_STARTED),
    (S.IN_SERVICE, E.CLEARED),
    (S.IN_SERVICE, E.RESUMED),
    (S.SUSPECT, E.VALIDATION_STARTED),       # only a node we took out is validated
    (S.HELD_FOR_REPAIR, E.VALIDATION_STARTED),
    (S.OUT_OF_SERVICE, E.VALIDATION_PASSED),  # no validation runs
    (S.OUT_OF_SERVICE, E.VALIDATION_FAILED),
    (S.IN_SERVICE, E.REPEAT_OFFENDER),
    (S.IN_SERVICE, E.SEEN_BACK),
])
def test_refused_transitions_raise_and_name_the_state(state: lifecycle.NodeState, event: lifecycle.NodeEvent) -> None:
    with pytest.raises(lifecycle.Refused, match=state.value):
        lifecycle.advance(state, event)


def test_every_pair_is_either_in_the_table_a_no_change_fact_or_refused() -> None:
    for state, event in itertools.product(S, E):
        if (state, event) in lifecycle.TRANSITIONS:
            assert lifecycle.advance(state, event) is lifecycle.TRANSITIONS[(state, event)]
        elif event in lifecycle.NO_CHANGE_EVENTS:
            assert lifecycle.advance(state, event) is state
        else:
            with pytest.raises(lifecycle.Refused):
                lifecycle.advance(state, event)


def test_a_node_already_out_named_again_stays_where_it_is() -> None:
    for state in (S.OUT_OF_SERVICE, S.VALIDATING, S.HELD_FOR_REPAIR, S.OTHER):
        assert lifecycle.advance(state, E.NAMED) is state


def test_out_by_us_covers_our_states_only() -> None:
    assert {s for s in S if lifecycle.out_by_us(s)} == {S.OUT_OF_SERVICE, S.VALIDATING, S.HELD_FOR_REPAIR}


def test_nodes_out_are_a_drains_node_and_a_kubernetes_workloads_exclusions_only() -> None:
    assert lifecycle.nodes_out("drain_node", {"node": "n1"}) == ["n1"]
    assert lifecycle.nodes_out("exclude_nodes", {"job_id": "k8s/ns/JobSet/a", "excluded_nodes": ["n2"]}) == ["n2"]
    assert lifecycle.nodes_out("exclude_nodes", {"job_id": "42", "excluded_nodes": ["n2"]}) == []
    assert lifecycle.nodes_out("requeue", {"job_id": "42"}) == []
