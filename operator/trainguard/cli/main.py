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
               "scorecard", "db", "actions", "nodes")
"""Modules under ``trainguard.cli`` that register a sub-command, in ``--help`` order."""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line parser; ``only``: register that one sub-command (the one being run).

    Importing every sub-command costs ~0.2 s of CPU (pydantic models, the engine, the HTTP
    server), as much as `trainguard scan` needs for 300 MB of log; a run needs only its own.
    """
    parser = argparse.ArgumentParser(
        prog="trainguard",
        description="Recovery operator for distributed AI training: detects crashes, hangs and "
        "slowdowns, attributes them, and (in Action mode) requeues or stops the workload. "
        "Every recommendation is written to an audit log first.",
    )
    parser.add_argument("--version", action="version", version=f"trainguard {trainguard.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS if only is None else (only,):
        module = importlib.import_module(f"trainguard.cli.{name}")
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words[0] if words and words[0] in SUBCOMMANDS else None)
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
