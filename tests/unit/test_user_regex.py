"""Regexes from users (a job's comment, a policy) run on a linear-time engine or are refused.

The hostile regexes below make Python ``re`` backtrack for minutes on one crafted line
(``(a|a)*$`` doubles its work per ``a``; ``[0-9]*`` five times is a polynomial of degree six).
They must either be refused with a reason or run in time linear in the line, on every path a
user regex reaches: policy validation, the opt-in comment, progress parsing, the checkpoint regex.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from pydantic import ValidationError

from trainguard.detect import progress, sanitize
from trainguard.model import user_regex
from trainguard.policy import model, overrides

HOSTILE = {
    r"(a|a)*$": "a" * 64 + "!",
    r"\d*\d*\d*\d*\d*$": "1" * 5000 + "x",
    r"[0-9]*[0-9]*[0-9]*[0-9]*[0-9]*$": "1" * 5000 + "x",
    r"(a+)+$": "a" * 64 + "!",
    r"(x|x|x)*y": "x" * 64,
}
"""Regex -> a line on which Python ``re`` would not finish in any useful time."""


@pytest.mark.parametrize(("pattern", "text", "found"), [
    (r"(a|a)*$", "aaa", "aaa"),
    (r"\d*\d*\d*\d*\d*$", "step 123", "123"),
    (r"(a+)+$", "baa", "aa"),
    (r"(x|x|x)*y", "zxxy", "xxy"),
    (r"(?i)saved checkpoint", "Saved Checkpoint 3", "Saved Checkpoint"),
])
def test_hostile_looking_regexes_compile_and_match_like_re(pattern: str, text: str, found: str) -> None:
    hit = user_regex.compile(pattern).search(text)
    assert hit is not None and hit.group(0) == found


@pytest.mark.parametrize(("pattern", "reason"), [
    (r"(a)\1", "back-references need a backtracking engine"),
    (r"(?P<a>x)(?P=a)", "back-references need a backtracking engine"),
    (r"saved(?= checkpoint)", "look-ahead '(?=' needs a backtracking engine"),
    (r"(?<!not )saved", "negative look-behind '(?<!' needs a backtracking engine"),
    (r"(?<=ckpt )\d+", "look-behind '(?<=' needs a backtracking engine"),
    (r"a.{500}c", "too large for the linear-time engine"),
    (r"a{1001}", "does not compile in the linear-time engine RE2: invalid repetition size"),
    (r"(unclosed", "does not compile in the linear-time engine RE2: missing )"),
])
def test_what_re2_cannot_run_in_linear_time_is_refused_with_the_reason(pattern: str, reason: str) -> None:
    with pytest.raises(user_regex.RegexRefused, match="^" + re.escape(reason)):
        user_regex.compile(pattern)


def test_named_groups_keep_working_for_progress_parsing() -> None:
    parser = progress.ProgressParser(r"step (?P<step>\d+) .* (?P<rate>[\d.]+) tok/s")
    found = parser.parse("step 12 | loss 2.1 | 3400.5 tok/s")
    assert found is not None and (found.step, found.rate) == (12, 3400.5)
    with pytest.raises(ValueError, match="progress regex refused: back-references"):
        progress.ProgressParser(r"(a)\1")


def test_a_line_with_a_lone_surrogate_is_searched_not_crashed_on() -> None:
    assert user_regex.compile("ckpt").search("saved ckpt \udcff") is not None


def test_a_policy_regex_the_linear_engine_refuses_is_a_validation_error_with_the_reason() -> None:
    with pytest.raises(ValidationError, match="too large for the linear-time engine"):
        model.Detection.model_validate({"checkpointRegex": "a.{500}c"})
    with pytest.raises(ValidationError, match="does not compile in the linear-time engine RE2"):
        model.Detection.model_validate({"progressRegex": r"iteration \d+\Z"})
    assert model.Detection.model_validate({"progressRegex": r"(a|a)*$"}).progress_regex == r"(a|a)*$"


def _extra_pattern(**changes: Any) -> dict[str, Any]:
    pattern = {"id": "site.ib_link_down", "category": "nccl_error", "attribution_hint": "hardware",
               "severity": "error", "regex": "ib link (down|flapping)", "extract": {"host": r"on (\S+)"}}
    return pattern | changes


def test_an_extra_pattern_the_linear_engine_refuses_is_a_validation_error() -> None:
    assert model.Detection.model_validate({"extraPatterns": [_extra_pattern()]}).extra_patterns
    with pytest.raises(ValidationError, match=r"pattern site.ib_link_down extract.host: look-ahead"):
        model.Detection.model_validate({"extraPatterns": [_extra_pattern(extract={"host": r"on (\S+)(?= port)"})]})
    with pytest.raises(ValidationError, match=r"pattern site.ib_link_down regex: too large"):
        model.Detection.model_validate({"extraPatterns": [_extra_pattern(regex="ib .{400} down")]})


def test_a_comment_regex_is_refused_with_the_reason_or_compiled_linear() -> None:
    opt_in = overrides.parse_opt_in(
        "trainguard checkpoint-regex=(a|a)*$ progress-regex='a.{500}c' max-retries=1")
    assert opt_in is not None
    assert opt_in.overrides == {"checkpoint-regex": "(a|a)*$", "max-retries": 1}
    assert opt_in.errors == ["progress-regex='a.{500}c': too large for the linear-time engine (4006 > 1000 RE2 "
                             "instructions); wide bounded repeats such as .{0,500} and large classes such as "
                             r"\p{L} cost many; .* costs few"]


def test_hostile_comment_regexes_on_hostile_lines_finish_at_once() -> None:
    """Every hostile regex, given in a job's comment, runs on its hostile line (cut to the longest
    line detection keeps) through the comment, the effective spec, progress parsing and the
    checkpoint regex. In a subprocess: with Python ``re`` this would run for hours; the bound is
    there only so that a regression fails instead of hanging the suite."""
    script = textwrap.dedent("""
        import json, sys
        from trainguard.detect import progress, sanitize
        from trainguard.model import user_regex
        from trainguard.policy import model, overrides
        for pattern, line in json.load(sys.stdin).items():
            line = sanitize.clean_line(line * (sanitize.DEFAULT_MAX_CHARS // len(line)))
            quote = "'" if '"' in pattern else '"'
            opt_in = overrides.parse_opt_in(
                f"trainguard checkpoint-regex={quote}{pattern}{quote} progress-regex={quote}{pattern}{quote}")
            spec, errors = overrides.resolve(model.RecoveryPolicySpec(), opt_in)
            assert errors == [], errors
            assert spec.detection.progress_regex == spec.detection.checkpoint_regex == pattern
            progress.ProgressParser(spec.detection.progress_regex).parse(line)
            user_regex.compile(spec.detection.checkpoint_regex).search(line)
        print("done")
    """)
    try:
        proc = subprocess.run([sys.executable, "-c", script], input=json.dumps(HOSTILE), capture_output=True,
                              text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("a hostile regex on its hostile line ran for a minute: it backtracks")
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
    assert sanitize.DEFAULT_MAX_CHARS == 64 * 1024, "the bound stated in docs/safety.md changed"


def test_without_re2_every_user_regex_is_refused_never_run_by_python_re() -> None:
    """``sys.modules['re2'] = None`` makes ``import re2`` fail as on a machine without the package."""
    script = textwrap.dedent("""
        import sys
        sys.modules["re2"] = None
        from trainguard.model import user_regex
        try:
            user_regex.compile("saved ckpt")
        except user_regex.RegexRefused as exc:
            print(exc)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "RE2 (pip package google-re2) is not installed, so user regexes are refused" in proc.stdout
