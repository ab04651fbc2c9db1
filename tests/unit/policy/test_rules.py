"""spec.rules: per-symptom/attribution/category/exit-code rules, first match wins; and the hang that
cannot be requeued. Decisions are checked through ``policy.decide`` (the pure function), the schema
through ``policy.loader`` (the errors an operator sees)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.policy.test_decide import _anomaly, _decide, _history, _job, _spec, _verdict
from trainguard.model import vocab, workloads
from trainguard.policy import loader, model

A = vocab.AdviceAction
J = workloads.JobState
S = vocab.Symptom
HANG = _anomaly(S.HANG, vocab.Category.PROGRESS_STALLED)
HANG_VERDICT = _verdict(vocab.Attribution.UNKNOWN, vocab.Category.PROGRESS_STALLED)


def _rules(*rules: dict[str, Any], **sections: Any) -> model.RecoveryPolicySpec:
    return _spec(rules=list(rules), **sections)


def test_no_rules_keeps_the_built_in_behaviour() -> None:
    assert _decide(_rules()) == _decide()


def test_an_exit_code_rule_stops_what_would_have_been_requeued() -> None:
    spec = _rules({"match": {"exitCodes": [42]}, "action": "Stop"})
    result = _decide(spec, job=_job(exit_code=42), verdict=_verdict(vocab.Attribution.UNKNOWN, vocab.Category.NONE))
    assert result.action == A.STOP
    assert result.reasons[0].startswith("rule 0 (exitCodes 42) matched crash unknown")
    other = _decide(spec, job=_job(exit_code=1), verdict=_verdict(vocab.Attribution.UNKNOWN, vocab.Category.NONE))
    assert other.action == A.REQUEUE


def test_an_exit_code_rule_never_matches_a_job_that_is_still_running() -> None:
    spec = _rules({"match": {"exitCodes": [0]}, "action": "Ignore"})
    result = _decide(spec, anomaly=HANG, verdict=HANG_VERDICT, job=_job(state=J.RUNNING, exit_code=0))
    assert result.action == A.REQUEUE


def test_first_matching_rule_wins() -> None:
    spec = _rules(
        {"match": {"attributions": ["application"]}, "action": "Stop"},
        {"match": {"categories": ["gpu_xid_hardware"]}, "action": "Hold"},
        {"match": {}, "action": "Ignore"},
        actions={"allowed": ["requeue", "stop", "hold"]},
    )
    app = _decide(spec, verdict=_verdict(vocab.Attribution.APPLICATION, vocab.Category.PYTHON_EXCEPTION))
    assert app.action == A.STOP
    xid = _decide(spec)
    assert xid.action == A.HOLD and xid.exclude_nodes == []
    assert xid.reasons[0].startswith("rule 1 (categories gpu_xid_hardware)")
    other = _decide(spec, verdict=_verdict(vocab.Attribution.SYSTEM, vocab.Category.NCCL_TIMEOUT))
    assert other.action == A.NONE and other.reasons[0].endswith(": Ignore")


def test_all_conditions_of_one_match_must_hold() -> None:
    spec = _rules({"match": {"symptoms": ["hang"], "attributions": ["hardware"]}, "action": "Stop"})
    assert _decide(spec).action == A.REQUEUE  # a hardware crash, not a hang
    assert _decide(spec, anomaly=HANG, verdict=HANG_VERDICT, job=_job(state=J.RUNNING, exit_code=None)).action \
        == A.REQUEUE  # a hang, not hardware
    hung_hw = _decide(spec, anomaly=HANG, job=_job(state=J.RUNNING, exit_code=None))
    assert hung_hw.action == A.STOP


def test_requeue_excluding_excludes_the_suspects_of_any_attribution_and_plain_requeue_excludes_none() -> None:
    ib = _verdict(vocab.Attribution.SYSTEM, vocab.Category.NCCL_NETWORK_IB, nodes=["n3"])
    assert _decide(verdict=ib).exclude_nodes == []  # built in: only hardware suspects are excluded
    excluding = _decide(_rules({"match": {"categories": ["nccl_network_ib"]}, "action": "RequeueExcluding"}),
                        verdict=ib)
    assert (excluding.action, excluding.exclude_nodes) == (A.REQUEUE, ["n3"])
    plain = _decide(_rules({"match": {"attributions": ["hardware"]}, "action": "Requeue"}))
    assert (plain.action, plain.exclude_nodes) == (A.REQUEUE, [])


def test_a_rule_requeue_still_spends_the_retry_budget() -> None:
    spec = _rules({"match": {"attributions": ["application"]}, "action": "Requeue"}, retries={"maxRetries": 2})
    result = _decide(spec, verdict=_verdict(vocab.Attribution.APPLICATION, vocab.Category.PYTHON_EXCEPTION),
                     attempt=2, history=_history(retries=2))
    assert result.action == A.STOP
    assert any("retries exhausted" in reason for reason in result.reasons)


def test_the_jobs_own_do_not_requeue_code_comes_before_the_rules() -> None:
    spec = _rules({"match": {"exitCodes": [93]}, "action": "Requeue"})
    result = _decide(spec, job=_job(exit_code=93, state=J.RUNNING))
    assert result.action == A.STOP


def test_a_rule_action_the_policy_does_not_allow_falls_back() -> None:
    spec = _rules({"match": {}, "action": "Hold"}, actions={"allowed": ["requeue"]})
    result = _decide(spec)
    assert result.action == A.NONE
    assert any("hold is not in actions.allowed" in reason for reason in result.reasons)


# ------------------------------------------------------------------ the hang that cannot be requeued


def test_a_hung_job_that_cannot_be_requeued_is_stopped() -> None:
    result = _decide(anomaly=HANG, verdict=HANG_VERDICT, job=_job(state=J.RUNNING, exit_code=None,
                                                                  requeue_allowed=False))
    assert result.action == A.STOP
    assert "the job cannot be requeued (submitted with --no-requeue) and is hung: stop" in result.reasons


def test_a_hung_job_past_its_retries_is_stopped() -> None:
    result = _decide(_spec(retries={"maxRetries": 1}), anomaly=HANG, verdict=HANG_VERDICT, attempt=1,
                     job=_job(state=J.RUNNING, exit_code=None, attempt=1))
    assert result.action == A.STOP


def test_a_hung_job_that_cannot_be_requeued_is_held_when_stop_is_not_allowed() -> None:
    result = _decide(_spec(actions={"allowed": ["requeue", "hold"]}), anomaly=HANG, verdict=HANG_VERDICT,
                     job=_job(state=J.RUNNING, exit_code=None, requeue_allowed=False))
    assert result.action == A.HOLD


def test_a_finished_job_that_cannot_be_requeued_still_gets_nothing() -> None:
    result = _decide(job=_job(requeue_allowed=False))
    assert result.action == A.NONE


# ------------------------------------------------------------------ the schema


def _load(rules: str) -> model.RecoveryPolicySpec:
    return loader.parse_text(f"rules:\n{rules}").policies[0].spec


def test_rules_parse_from_yaml() -> None:
    spec = _load("  - match: {exitCodes: [93, 94], symptoms: [crash]}\n    action: Stop\n"
                 "  - match: {categories: [gpu_xid_hardware]}\n    action: RequeueExcluding\n")
    assert [r.action for r in spec.rules] == [model.RuleAction.STOP, model.RuleAction.REQUEUE_EXCLUDING]
    assert spec.rules[0].match.exit_codes == [93, 94]
    assert model.RecoveryPolicySpec().rules == []


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ("  - match: {exitCodes: [256]}\n    action: Stop\n", "spec.rules.0.match.exitCodes.0: Input should be less"),
        ("  - match: {categories: [gpu_on_fire]}\n    action: Stop\n", "spec.rules.0.match.categories.0: Input"),
        ("  - match: {}\n    action: Reboot\n", "spec.rules.0.action: Input should be 'Requeue'"),
        ("  - match: {attribution: application}\n    action: Stop\n",
         "unknown field 'attribution': the field is 'attributions', a list"),
        ("  - action: Stop\n", "spec.rules.0.match: Field required"),
        ("  - match: {}\n    action: Stop\n  - match: {exitCodes: [1]}\n    action: Requeue\n",
         "rule 0 matches every failure, so the 1 rule(s) after it can never apply"),
    ],
)
def test_bad_rules_are_clear_one_line_errors(rules: str, message: str) -> None:
    with pytest.raises(loader.PolicyError) as error:
        _load(rules)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_the_crd_makes_a_rule_spell_out_its_match() -> None:
    """The apiserver applies defaults before it checks required fields: a defaulted ``match: {}``
    would turn a rule whose match was forgotten into a catch-all."""
    item = model.crd_openapi_schema()["properties"]["rules"]["items"]
    assert item["required"] == ["match", "action"]
    assert "default" not in item["properties"]["match"]
