"""Every sub-command and every option of ``trainguard`` explains itself in ``--help``.

The test walks the real argparse tree (``cli.main.build_parser``), so an option added later without
``help=`` fails here, and each ``--help`` is rendered once so a broken help string (e.g. a stray
``%`` that argparse tries to format) fails too.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Iterator

import pytest

from trainguard.cli import main

Command = tuple[tuple[str, ...], argparse.ArgumentParser]


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[Command]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))


def _commands() -> list[Command]:
    return list(_walk(main.build_parser(), ("trainguard",)))


def _missing_help(path: tuple[str, ...], parser: argparse.ArgumentParser) -> list[str]:
    missing = []
    for action in parser._actions:
        name = "/".join(action.option_strings) or action.dest
        if isinstance(action, argparse._SubParsersAction):
            described = {choice.dest: choice.help for choice in action._choices_actions}
            missing += [f"{' '.join(path)} {sub}: no help" for sub in action.choices if not described.get(sub)]
            continue
        if not action.help or action.help == argparse.SUPPRESS:
            missing.append(f"{' '.join(path)} {name}: no help")
    return missing


def test_every_subcommand_and_option_has_help() -> None:
    commands = _commands()
    assert {" ".join(path) for path, _ in commands} >= {
        "trainguard", "trainguard detect", "trainguard scan", "trainguard patterns", "trainguard patterns export",
        "trainguard run", "trainguard audit", "trainguard operator", "trainguard policy", "trainguard policy validate",
    }
    missing = [line for path, parser in commands for line in _missing_help(path, parser)]
    assert missing == []


@pytest.mark.parametrize("path", [" ".join(path[1:]) for path, _ in _commands()])
def test_help_renders(path: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        main.main([*path.split(), "--help"])
    assert exit_info.value.code == 0
    assert out.getvalue().startswith("usage: trainguard")
