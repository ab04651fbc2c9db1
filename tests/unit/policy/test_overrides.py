"""The opt-in comment: strict opt-in, typed overrides, errors instead of exceptions, hostile input."""

from __future__ import annotations

import pytest

from trainguard.model import vocab
from trainguard.policy import model, overrides


@pytest.mark.parametrize(
    "comment",
    ["trainguard", "  trainguard  ", '"trainguard"', "'trainguard policy=gpu'", "trainguard\tpolicy=gpu"],
)
def test_opted_in(comment: str) -> None:
    opt_in = overrides.parse_opt_in(comment)
    assert opt_in is not None
    assert opt_in.errors == []


@pytest.mark.parametrize(
    "comment",
    [
        None,
        "",
        "   ",
        "trainguardx",
        "notrainguard",
        "Trainguard",
        "TRAINGUARD",
        "trainguard=1",
        "ｔrainguard",
        "trainguard\u200b",
        "my job trainguard",
        "#trainguard",
        '"trainguard',
    ],
)
def test_not_opted_in(comment: str | None) -> None:
    assert overrides.parse_opt_in(comment) is None


def test_custom_tag() -> None:
    assert overrides.parse_opt_in("tg policy=a", tag="tg") is not None
    assert overrides.parse_opt_in("trainguard", tag="tg") is None


def test_documented_example_parses_to_typed_values() -> None:
    opt_in = overrides.parse_opt_in('"trainguard policy=gpu-large max-retries=2 hang-timeout=90s"')
    assert opt_in == overrides.OptIn(policy_name="gpu-large", overrides={"max-retries": 2, "hang-timeout": 90.0})


def test_every_supported_key() -> None:
    opt_in = overrides.parse_opt_in(
        "trainguard mode=monitor max-retries=2 max-attempts-without-checkpoint=1 hang-timeout=1h "
        "progress-regex=iter checkpoint-regex='saved ckpt [0-9]+' throughput-drop-threshold=0.3 "
        "throughput-drop-action=requeue exclude-on-hardware=no max-excluded-nodes=1"
    )
    assert opt_in is not None and opt_in.errors == []
    assert set(opt_in.overrides) == set(overrides.SUPPORTED)
    spec, errors = overrides.resolve(model.RecoveryPolicySpec(mode=vocab.Mode.ACTION), opt_in)
    assert errors == []
    assert spec.mode == vocab.Mode.MONITOR
    assert spec.retries.max_retries == 2
    assert spec.retries.max_attempts_without_checkpoint == 1
    assert spec.detection.hang_timeout == 3600.0
    assert spec.detection.progress_regex == "iter"
    assert spec.detection.checkpoint_regex == "saved ckpt [0-9]+"
    assert spec.detection.throughput_drop_threshold == 0.3
    assert spec.detection.throughput_drop_action == "requeue"
    assert spec.exclusion.exclude_on_hardware is False
    assert spec.exclusion.max_excluded_nodes_per_job == 1


@pytest.mark.parametrize(
    ("comment", "error"),
    [
        ("trainguard max-retrys=2", "unknown key 'max-retrys'"),
        ("trainguard max-retries=999", "max-retries='999'"),
        ("trainguard max-retries=-1", "expected a whole number"),
        ("trainguard max-retries=1e9", "expected a whole number"),
        ("trainguard hang-timeout=30", "a bare number is not accepted"),
        ("trainguard throughput-drop-threshold=2", "throughput-drop-threshold='2'"),
        ("trainguard throughput-drop-action=restart", "expected one of off, requeue"),
        ("trainguard exclude-on-hardware=maybe", "expected true or false"),
        ("trainguard checkpoint-regex=a.{500}c", "too large for the linear-time engine"),
        ("trainguard checkpoint-regex=(?<=x)y", "not portable"),
        ("trainguard checkpoint-regex=" + "a" * 300, "longer than 256"),
        ("trainguard policy=Bad_Name", "not a valid policy name"),
        ("trainguard policy=a max-retries=1 max-retries=2", "'max-retries' given twice"),
        ("trainguard hello", "'hello' is not key=value"),
        ('trainguard policy="unterminated', "unbalanced quote"),
        ("trainguard mode=action", "only its RecoveryPolicy can"),
    ],
)
def test_bad_overrides_are_errors_not_exceptions(comment: str, error: str) -> None:
    opt_in = overrides.parse_opt_in(comment)
    assert opt_in is not None
    assert any(error in message for message in opt_in.errors), opt_in.errors


def test_first_value_of_a_repeated_key_wins() -> None:
    opt_in = overrides.parse_opt_in("trainguard max-retries=1 max-retries=2")
    assert opt_in is not None and opt_in.overrides == {"max-retries": 1}


def test_unreadable_mode_forces_monitor_but_action_request_keeps_policy_mode() -> None:
    garbled = overrides.parse_opt_in("trainguard mode=monitr")
    assert garbled is not None and garbled.overrides == {"mode": "Monitor"}
    asked = overrides.parse_opt_in("trainguard mode=action")
    assert asked is not None and asked.overrides == {}
    spec, _ = overrides.resolve(model.RecoveryPolicySpec(mode=vocab.Mode.ACTION), asked)
    assert spec.mode == vocab.Mode.ACTION


def test_apply_refuses_to_raise_the_mode() -> None:
    with pytest.raises(overrides.OverrideError, match="only lower the mode"):
        overrides.apply_overrides(model.RecoveryPolicySpec(), {"mode": "Action"})
    with pytest.raises(overrides.OverrideError, match="unknown override key"):
        overrides.apply_overrides(model.RecoveryPolicySpec(), {"drain-lemon-nodes": True})


def test_valid_overrides_survive_a_bad_neighbour() -> None:
    opt_in = overrides.parse_opt_in("trainguard max-retries=1 hang-timeout=soon")
    assert opt_in is not None
    spec, errors = overrides.resolve(model.RecoveryPolicySpec(), opt_in)
    assert spec.retries.max_retries == 1
    assert spec.detection.hang_timeout == 1800.0
    assert len(errors) == 1 and "hang-timeout" in errors[0]


@pytest.mark.parametrize(
    "comment",
    [
        "trainguard policy=$(rm -rf /) max-retries=`id`; echo pwned | sh",
        "trainguard max-retries=2\x00\x1b[31m",
        "trainguard " + "max-retries=1 " * 5000,
        "trainguard " + "x" * 10_000_000,
        "trainguard policy=ü🚀 hang-timeout=１０s",
        "trainguard =value key= ==",
        "trainguard checkpoint-regex='(' progress-regex='[z-a]'",
        "trainguard '\"",
    ],
)
def test_hostile_comments_never_raise_and_never_override(comment: str) -> None:
    opt_in = overrides.parse_opt_in(comment)
    assert opt_in is not None
    assert opt_in.errors
    assert opt_in.policy_name is None
    assert opt_in.overrides == {}
    for message in opt_in.errors:
        assert message.isprintable() and len(message) < 600


def test_control_characters_ignore_all_overrides() -> None:
    opt_in = overrides.parse_opt_in("trainguard policy=gpu max-retries=9\x07")
    assert opt_in == overrides.OptIn(errors=["comment contains control characters: overrides ignored"])


@pytest.mark.parametrize(
    "comment",
    ["trainguard max-retries=4", "trainguard max-attempts-without-checkpoint=3", "trainguard max-excluded-nodes=5"],
)
def test_a_job_cannot_raise_the_policys_budgets(comment: str) -> None:
    """maxRetries 3, maxAttemptsWithoutCheckpoint 2, maxExcludedNodesPerJob 2 are ceilings."""
    opt_in = overrides.parse_opt_in(comment)
    assert opt_in is not None and opt_in.errors == []
    default = model.RecoveryPolicySpec()
    spec, errors = overrides.resolve(default, opt_in)
    assert spec == default
    assert len(errors) == 1 and "a job can only lower it" in errors[0]
