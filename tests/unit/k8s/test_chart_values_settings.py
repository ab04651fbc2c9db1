"""The chart's values are held to the one settings definition (issue 24: no second definition).

A chart value that the Deployment hands to the operator as a ``TRAINGUARD_*`` variable, verbatim
(``value: {{ .Values.P | quote }}``), must accept what the setting accepts and nothing else: the
same choices, the same bounds, ``off`` where the setting may be unset, and the same default. A
setting changed in ``cli/config.py`` without its chart value (or the other way round) fails here,
before a ``helm install`` would render an operator that refuses to start or silently differs.
Plain files (the template text, values.yaml, values.schema.json), so no helm binary is needed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainguard.cli import config

pytestmark = pytest.mark.unit

CHART = Path(__file__).resolve().parents[3] / "charts" / "trainguard"
VERBATIM = re.compile(r"- name: (TRAINGUARD_[A-Z0-9_]+)\n\s+value: \{\{ \.Values\.([A-Za-z0-9.]+) \| quote \}\}")


def verbatim_values() -> dict[str, str]:
    """``TRAINGUARD_X`` -> the values path whose text the Deployment passes as it is."""
    text = (CHART / "templates" / "deployment.yaml").read_text(encoding="utf-8")
    return dict(VERBATIM.findall(text))


def field_of(env: str) -> str:
    found = [name for name in config.OperatorSettings.model_fields
             if env in config.env_names(config.OperatorSettings, name)]
    assert len(found) == 1, f"{env}: not one setting of trainguard operator ({found})"
    return found[0]


def at(tree: dict[str, Any], path: str, *, schema: bool) -> Any:
    node: Any = tree
    for key in path.split("."):
        node = node["properties"][key] if schema else node[key]
    return node


def test_the_deployment_passes_several_values_verbatim() -> None:
    # the scan itself: a template rewritten so that nothing matches would make the next test vacuous
    expected = {"TRAINGUARD_MODE", "TRAINGUARD_MAX_ACTIONS_PER_HOUR", "TRAINGUARD_NODE_POOL_LABEL"}
    assert expected <= set(verbatim_values())


@pytest.mark.parametrize("env", sorted(verbatim_values()))
def test_a_chart_value_accepts_what_its_setting_accepts(env: str) -> None:
    path = verbatim_values()[env]
    name = field_of(env)
    setting = config.OperatorSettings.model_json_schema()["properties"][name]
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    value = at(schema, path, schema=True)
    default = at(yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8")), path, schema=False)

    variants = setting.get("anyOf", [setting])
    typed = [v for v in variants if v.get("type") != "null"]
    nullable = len(typed) < len(variants)
    assert len(typed) == 1, f"{name}: one type expected, {variants}"
    (want,) = typed
    chart_variants = value.get("oneOf", [value])
    chart_typed = [v for v in chart_variants if "const" not in v]
    assert len(chart_typed) == 1, f"{path}: one typed variant expected, {chart_variants}"
    (got,) = chart_typed
    if "enum" in want:
        assert sorted(got.get("enum", [])) == sorted(want["enum"]), f"{path} vs --{name}: choices differ"
    else:
        assert got.get("type") == want.get("type"), f"{path} vs --{name}: types differ"
    for bound in ("minimum", "maximum", "minLength"):
        if bound == "minLength" and nullable and want.get(bound) is None and got.get(bound) == 1:
            continue  # an empty text means unset to the setting; the chart, rendering it only when on, asks for one
        assert got.get(bound) == want.get(bound), f"{path} vs --{name}: {bound} {got.get(bound)} != {want.get(bound)}"
    # 'off' is how the chart unsets a setting that may be unset, and only such a setting
    assert ({"const": "off"} in chart_variants) == (nullable and want.get("type") in ("integer", "number")), \
        f"{path}: 'off' allowed exactly when --{name} may be unset"
    wanted = setting.get("default")
    if default in ("", None) or wanted is None:
        return  # unset in the chart (the operator's own default applies), or a value the chart renders
        # only when its feature is enabled, for a setting that is off by default (slinky.namespace)
    assert default == wanted, f"{path} defaults to {default!r}, --{name} to {wanted!r}"
