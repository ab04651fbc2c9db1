"""The metric names a PromQL expression reads, for checking a dashboard against what we export.

Place: test support (the Grafana dashboard test). A small tokenizer, not a full PromQL parser: it
knows the language's lexical classes (strings, range/subquery brackets, label matchers in braces,
label lists after ``by``/``without``/``on``/``ignoring``/``group_left``/``group_right``, function
calls, keywords) well enough to tell metric names from everything else, and it rejects what a
dashboard should never contain: unbalanced brackets, unknown functions, unknown characters. No
PromQL parser is packaged for Python, and the Prometheus server's own parser would need a
running Prometheus; the dashboard test scrapes our real ``/metrics`` instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FUNCTIONS = frozenset({
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh", "avg_over_time",
    "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh", "count_over_time", "day_of_month",
    "day_of_week", "day_of_year", "days_in_month", "deg", "delta", "deriv", "exp", "floor", "histogram_avg",
    "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev", "histogram_stdvar",
    "histogram_sum", "holt_winters", "hour", "idelta", "increase", "irate", "label_join", "label_replace",
    "last_over_time",
    "ln", "log10", "log2", "mad_over_time", "max_over_time", "min_over_time", "minute", "month", "pi",
    "predict_linear", "present_over_time", "quantile_over_time", "rad", "rate", "resets", "round", "scalar", "sgn",
    "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc", "sort_desc", "sqrt", "stddev_over_time",
    "stdvar_over_time", "sum_over_time", "tan", "tanh", "time", "timestamp", "vector", "year",
})
AGGREGATIONS = frozenset({
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
    "quantile", "limitk", "limit_ratio",
})
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"})
LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\[\]]*\])
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+(?![A-Za-z0-9_:]))
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<op>==|!=|=~|!~|>=|<=|[-+*/%^<>=,@])
  | (?P<open>[({])
  | (?P<close>[)}])
""", re.VERBOSE)


def _tokens(expr: str) -> Iterator[tuple[str, str]]:
    pos = 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            raise ValueError(f"unexpected {expr[pos:pos + 10]!r} at {pos} in {expr!r}")
        pos = match.end()
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            yield kind, match.group()


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects. ValueError on what is not well-formed PromQL (as above)."""
    tokens = list(_tokens(expr))
    names: set[str] = set()
    stack: list[str] = []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "open":
            stack.append(text)
        elif kind == "close":
            if not stack or {"(": ")", "{": "}"}[stack.pop()] != text:
                raise ValueError(f"unbalanced {text!r} in {expr!r}")
        elif kind == "ident" and stack and stack[-1] == "{":
            pass  # a label name in a matcher
        elif kind == "ident" and text in LABEL_LIST_KEYWORDS:
            if following == "(":  # skip the label list
                close = next((j for j in range(i + 1, len(tokens)) if tokens[j][1] == ")"), None)
                if close is None:
                    raise ValueError(f"unclosed label list after {text!r} in {expr!r}")
                i = close
        elif kind == "ident" and following == "(":
            if text not in FUNCTIONS and text not in AGGREGATIONS:
                raise ValueError(f"unknown function {text!r} in {expr!r}")
        elif kind == "ident" and text.lower() not in KEYWORDS and text not in AGGREGATIONS:
            names.add(text)
        i += 1
    if stack:
        raise ValueError(f"unclosed {stack[-1]!r} in {expr!r}")
    return names


def dashboard_expressions(path: Path) -> list[tuple[str, str]]:
    """(panel title, expression) of every query of a Grafana dashboard JSON (rows' panels included)."""
    found: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            for target in panel.get("targets", []):
                if target.get("expr"):
                    found.append((str(panel.get("title", "")), str(target["expr"])))
            walk(panel.get("panels", []))

    walk(json.loads(path.read_text())["panels"])
    return found
