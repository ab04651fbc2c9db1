"""The opt-in comment of a Slurm job, ``trainguard policy=NAME max-retries=2 hang-timeout=90s``.

Place in the loop: job discovery hands each job's comment to ``parse_opt_in``; the engine picks
the policy named there and calls ``resolve`` (or ``apply_overrides``) to get the effective spec
that ``policy.decide`` uses for that job. Problems never raise: they come back in
``OptIn.errors`` and the engine records them on the workload.

Rules (the documented opt-in, docs/policy.md; users' sbatch scripts depend on them):

* the first word must be exactly the opt-in tag (``trainguard``); ``trainguardx``,
  ``notrainguard`` or ``Trainguard`` are not an opt-in, and neither is an empty comment;
* the comment may be padded and wrapped in one pair of quotes; values may be quoted
  (``checkpoint-regex="saved ckpt [0-9]+"``), with no escapes inside quotes;
* every other word is ``key=value`` with a key from ``SUPPORTED`` (policy fields in kebab-case);
  unknown keys, bad values and repeated keys are errors, the first value of a key wins;
* ``mode=monitor`` lets a job owner force Monitor mode; ``mode=action`` is refused, because only a
  policy an operator approved may act (the job keeps its policy's mode). Any other unreadable
  ``mode`` value forces Monitor: the owner clearly wanted to change the mode, and Monitor is safe;
* length caps (comment 1024 chars, 32 words, regex 256 chars) and a ban on control characters keep
  hostile comments from hurting the operator; a regex must also compile in the linear-time engine
  that runs it (``model.user_regex``, RE2): a regex it refuses (back-references, look-around, too
  large) is a rejected key with the reason, so no comment can make matching backtrack.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from trainguard.model import patterns, user_regex, vocab
from trainguard.policy import durations, model

OPT_IN_TAG = "trainguard"
MAX_COMMENT = 1024
MAX_WORDS = 32
MAX_REGEX = 256

SUPPORTED: dict[str, tuple[str, ...]] = {
    "mode": ("mode",),
    "max-retries": ("retries", "maxRetries"),
    "max-attempts-without-checkpoint": ("retries", "maxAttemptsWithoutCheckpoint"),
    "hang-timeout": ("detection", "hangTimeout"),
    "progress-regex": ("detection", "progressRegex"),
    "checkpoint-regex": ("detection", "checkpointRegex"),
    "throughput-drop-threshold": ("detection", "throughputDropThreshold"),
    "throughput-drop-action": ("detection", "throughputDropAction"),
    "exclude-on-hardware": ("exclusion", "excludeOnHardware"),
    "max-excluded-nodes": ("exclusion", "maxExcludedNodesPerJob"),
}
"""Override key -> path of the spec field it sets (camelCase, as in a policy file). Plus ``policy``."""

CEILINGS = frozenset({"max-retries", "max-attempts-without-checkpoint", "max-excluded-nodes"})
"""Budgets the operator's policy sets as ceilings: a job's comment may lower them, never raise them
(a job owner must not buy more restarts or exclusions than the cluster's operators allow)."""

_WORD = re.compile(r"""[^\s"'=]+=(?:"[^"]*"|'[^']*')|\S+""")
_POLICY_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


@dataclass(frozen=True)
class OptIn:
    """A job's opt-in: the policy it selects (None: the default), typed overrides, and problems."""

    policy_name: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _show(text: str, limit: int = 40) -> str:
    """A value safe to put in an error message: printable, short, quoted."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in text)
    return repr(clean if len(clean) <= limit else clean[:limit] + "...")


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1].strip()
    return text


def _integer(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,6}", text):
        raise ValueError("expected a whole number")
    return int(text)


def _fraction(text: str) -> float:
    if not re.fullmatch(r"[0-9]{0,3}(\.[0-9]{1,6})?", text) or text in ("", "."):
        raise ValueError("expected a number such as 0.5")
    return float(text)


def _boolean(text: str) -> bool:
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("expected true or false")


def _regex(text: str) -> str:
    if len(text) > MAX_REGEX:
        raise ValueError(f"longer than {MAX_REGEX} characters")
    patterns.check_portable(text)
    return user_regex.check(text)


def _mode(text: str) -> str:
    lowered = text.lower()
    if lowered == "monitor":
        return vocab.Mode.MONITOR.value
    if lowered == "action":
        raise ValueError("a job cannot switch itself to Action mode; only its RecoveryPolicy can")
    raise ValueError("expected 'monitor'")


def _choice(*allowed: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}")
        return text

    return convert


_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "mode": _mode,
    "max-retries": _integer,
    "max-attempts-without-checkpoint": _integer,
    "hang-timeout": durations.parse,
    "progress-regex": _regex,
    "checkpoint-regex": _regex,
    "throughput-drop-threshold": _fraction,
    "throughput-drop-action": _choice("off", "requeue"),
    "exclude-on-hardware": _boolean,
    "max-excluded-nodes": _integer,
}


def parse_opt_in(comment: str | None, tag: str = OPT_IN_TAG) -> OptIn | None:
    """The opt-in in ``comment``, or None when the job did not opt in. Never raises."""
    if not isinstance(comment, str):
        return None
    body = _unquote(comment[: MAX_COMMENT * 4])
    words = body.split(maxsplit=1)
    if not words or words[0] != tag:
        return None
    errors: list[str] = []
    rest = words[1] if len(words) > 1 else ""
    if len(body) > MAX_COMMENT:
        return OptIn(errors=[f"comment longer than {MAX_COMMENT} characters: overrides ignored"])
    if any(unicodedata.category(ch) == "Cc" and not ch.isspace() for ch in rest):
        return OptIn(errors=["comment contains control characters: overrides ignored"])
    tokens = _WORD.findall(rest)
    if len(tokens) > MAX_WORDS:
        errors.append(f"more than {MAX_WORDS} words: only the first {MAX_WORDS} are read")
        tokens = tokens[:MAX_WORDS]
    policy_name: str | None = None
    overrides: dict[str, Any] = {}
    seen: set[str] = set()
    for token in tokens:
        key, sep, raw = token.partition("=")
        if not sep or not key:
            errors.append(f"{_show(token)} is not key=value")
            continue
        if key in seen:
            errors.append(f"{_show(key)} given twice: the first value is kept")
            continue
        seen.add(key)
        value = _unquote(raw) if raw[:1] in "\"'" else raw
        if raw[:1] in "\"'" and (len(raw) < 2 or raw[-1] != raw[0]):
            errors.append(f"{_show(key)}: unbalanced quote")
            continue
        if key == "policy":
            if _POLICY_NAME.fullmatch(value):
                policy_name = value
            else:
                errors.append(f"policy={_show(value)} is not a valid policy name (lowercase DNS name)")
            continue
        convert = _CONVERTERS.get(key)
        if convert is None:
            errors.append(f"unknown key {_show(key)}; supported: policy, {', '.join(SUPPORTED)}")
            continue
        try:
            converted = convert(value)
            _check_bounds(key, converted)
        except ValueError as exc:
            errors.append(f"{key}={_show(value)}: {_first_line(exc)}")
            if key == "mode" and value.lower() != "action":
                overrides["mode"] = vocab.Mode.MONITOR.value
            continue
        overrides[key] = converted
    return OptIn(policy_name=policy_name, overrides=overrides, errors=errors)


def _first_line(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(str(error["msg"]) for error in exc.errors(include_url=False))
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _check_bounds(key: str, value: Any) -> None:
    """Validate ``value`` against the schema's bounds by applying it to a default spec."""
    apply_overrides(model.RecoveryPolicySpec(), {key: value})


class OverrideError(ValueError):
    """An override does not fit the policy it is applied to."""


def apply_overrides(spec: model.RecoveryPolicySpec, overrides: dict[str, Any]) -> model.RecoveryPolicySpec:
    """``spec`` with ``overrides`` (from ``OptIn.overrides``) applied and validated.

    Raises ``OverrideError`` naming the key if the result is invalid. Mode can only go down
    to Monitor: an ``Action`` override of a Monitor policy is an error.
    """
    document = spec.model_dump(by_alias=True)
    for key, value in overrides.items():
        path = SUPPORTED.get(key)
        if path is None:
            raise OverrideError(f"unknown override key {key!r}")
        if key == "mode" and value != vocab.Mode.MONITOR.value:
            raise OverrideError("a job can only lower the mode to Monitor")
        target = document
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = durations.format_seconds(value) if key == "hang-timeout" else value
    try:
        return model.RecoveryPolicySpec.model_validate(document)
    except ValidationError as exc:
        keys = ", ".join(overrides)
        raise OverrideError(f"overrides {keys} do not fit the policy: {_first_line(exc)}") from None


def resolve(spec: model.RecoveryPolicySpec, opt_in: OptIn) -> tuple[model.RecoveryPolicySpec, list[str]]:
    """The effective spec for a job and all problems (parse errors plus overrides that did not fit).

    Each override is tried on its own, so one bad value does not discard the others. Budgets
    (``CEILINGS``) may only be lowered below the policy's values.
    """
    errors = list(opt_in.errors)
    document = spec.model_dump(by_alias=True)
    for key, value in opt_in.overrides.items():
        if key in CEILINGS and isinstance(value, int):
            section, name = SUPPORTED[key]
            ceiling = document[section][name]
            if value > ceiling:
                errors.append(f"{key}={value} is above the policy's {name} ({ceiling}): a job can only lower it")
                continue
        try:
            spec = apply_overrides(spec, {key: value})
        except OverrideError as exc:
            errors.append(str(exc))
    return spec, errors
