"""docs/settings.md is generated from the one settings definition (``cli/config.py``) and checked by
``hack/gen-crds --check``; the hand-written table of docs/cli.md names only flags that exist, and its
settings are settings of that definition."""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

import pytest

from trainguard.cli import config, main, settings_doc

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
NOT_SETTINGS = {
    "--format": "the output format of the commands that print (common.add_format_argument)",
    "--print-config": "an action of run, operator, doctor and scorecard, not a setting",
    "--policy-name": "scorecard's filter by policy name",
}
"""Options of docs/cli.md's table that are not settings, with what they are."""


def _option_strings() -> set[str]:
    """Every option of every command of the real parser."""
    found: set[str] = set()
    pending = [main.build_parser()]
    while pending:
        parser = pending.pop()
        for action in parser._actions:
            found.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(action.choices.values())
    return found


def _rows() -> dict[str, list[str]]:
    """Setting name -> the rows of docs/settings.md about it."""
    rows: dict[str, list[str]] = {}
    for line in (REPO / settings_doc.PATH).read_text(encoding="utf-8").splitlines():
        found = re.match(r"\| `(\w+)` \|", line)
        if found:
            rows.setdefault(found.group(1), []).append(line)
    return rows


def test_repository_page_is_up_to_date() -> None:
    assert settings_doc.main(["--root", str(REPO), "--check"]) == 0


def test_every_setting_of_every_command_has_a_row_with_its_flag_and_variables() -> None:
    rows = _rows()
    for cls in settings_doc.COMMANDS:
        for name in cls.model_fields:
            if cls.FLAGS is not None and name not in cls.FLAGS:
                continue
            text = " ".join(rows[name])
            assert f"`{config.flag_of(cls, name)}" in text, name
            for env in config.env_names(cls, name):
                assert f"`{env}`" in text, (name, env)
            assert f"| {cls.COMMAND}" in text or f", {cls.COMMAND}" in text, (name, cls.COMMAND)
    assert "audit" in rows["db_url"][0] and "patterns fired" in rows["db_url"][0]
    assert "detect" not in rows["patterns_file"][0]  # its own flag there, not read from the environment


def test_check_finds_a_hand_edit_and_the_script_runs_it(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    shutil.copy(REPO / settings_doc.PATH, tmp_path / settings_doc.PATH)
    assert settings_doc.main(["--root", str(tmp_path), "--check"]) == 0
    page = tmp_path / settings_doc.PATH
    page.write_text(page.read_text().replace("seconds between job listings", "seconds between listings"))
    assert settings_doc.main(["--root", str(tmp_path), "--check"]) == 1
    assert settings_doc.main(["--root", str(tmp_path)]) == 0
    assert settings_doc.main(["--root", str(tmp_path), "--check"]) == 0
    page.unlink()
    assert settings_doc.main(["--root", str(tmp_path), "--check"]) == 1
    script = (REPO / "hack" / "gen-crds").read_text()
    assert "-m trainguard.cli.settings_doc" in script  # hack/gen-crds [--check] writes and checks it


def test_cli_md_table_names_only_settings_and_links_the_reference() -> None:
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert "](settings.md)" in text
    section = text.split("## One family of options", 1)[1].split("\n## ", 1)[0]
    table = "\n".join(line for line in section.splitlines() if line.startswith("| `"))
    first_cells = [line.split(" | ")[0] for line in table.splitlines()]
    flags = {flag for cell in first_cells for flag in re.findall(r"`(--[a-z-]+)", cell)}
    assert len(flags) > 5
    known = {config.flag_of(cls, name) for cls in settings_doc.COMMANDS for name in cls.model_fields}
    assert sorted(flags - known - set(NOT_SETTINGS)) == []
    assert sorted(flags & set(NOT_SETTINGS) - _option_strings()) == []  # the others exist, as options
    envs = {env for cls in settings_doc.COMMANDS for name in cls.model_fields for env in config.env_names(cls, name)}
    assert sorted(set(re.findall(r"TRAINGUARD_[A-Z_]+", table)) - envs) == []
