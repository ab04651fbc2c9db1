"""Entry point of the ``trainguard`` console script.

Each sub-command lives in its own module exposing ``add_parser(subparsers)``, which
registers the sub-command and sets ``func`` (``args -> exit code``) as its default.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

import trainguard

SUBCOMMANDS = ("detect", "scan", "patterns", "policy", "run", "audit", "goodput", "backtest", "operator", "doctor",
               "scorecard")
"""Modules under ``trainguard.cli`` that register a sub-command, in ``--help`` order."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainguard",
        description="Recovery operator for distributed AI training: detects crashes, hangs and "
        "slowdowns, attributes them, and (in Action mode) requeues or stops the workload. "
        "Every recommendation is written to an audit log first.",
    )
    parser.add_argument("--version", action="version", version=f"trainguard {trainguard.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"trainguard.cli.{name}")
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        code: int = func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # e.g. `trainguard audit | head`: the reader left; not an error of ours.
        sys.stderr.close()
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
