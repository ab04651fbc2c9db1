"""`trainguard scan --stats FILE...`: the raw matcher over whole inputs, no detection logic.

Shell over ``detect.matcher.Matcher.scan_stream``. The output is a contract (docs/cli.md; scripts
and benchmarks read it): one JSON object per input, one per line, in argument order, with
``lines``, ``matched_lines``, ``patterns`` (id -> lines) and ``seconds``, plus ``path``,
``input`` (as ``trainguard detect``: ``ok`` | ``empty`` | ``binary`` | ``unreadable``), ``engine``
and ``catalog_version``. With one input that is exactly one JSON object. ``matched_lines`` equals
``rg -c -f <(trainguard patterns export --format lines) FILE``. ``-`` reads standard input.

Exit codes and messages are those of ``trainguard detect``: 0 every input was read as text; 1 some
input was empty, binary or unreadable (one line on stderr each; the others are still scanned;
a binary input is still counted, byte for byte, as ripgrep would); 2 bad arguments or a bad
``--patterns-file`` (nothing was read).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from trainguard.cli import common
from trainguard.detect import inputs
from trainguard.detect import matcher as matchers


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "scan",
        help="count catalog matches in log files (raw matcher, no detection)",
        description="Count lines, matched lines and lines per pattern in each input with the raw matcher. "
        "Prints one JSON object per input (one line each, in argument order).",
        epilog="Exit status: 0 every input was read as text; 1 some input was empty, binary or unreadable "
        "(one line on stderr each, as 'trainguard detect' reports them); 2 bad arguments or --patterns-file.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="log file to scan; '-' for standard input")
    parser.add_argument("--stats", action="store_true", help="print the statistics JSON object (the default output)")
    parser.add_argument("--engine", choices=("auto", *matchers.ENGINES), default="auto", help="matcher engine")
    parser.add_argument(
        "--patterns-file",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="operator patterns (YAML, catalog schema) added to the built-in catalog; repeatable",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    catalog = common.load_catalog("scan", args.patterns_file)
    if catalog is None:
        return common.USAGE_ERROR
    try:
        matcher = matchers.build_matcher(catalog, args.engine)
    except matchers.MatcherError as exc:
        common.error("scan", str(exc))
        return common.USAGE_ERROR
    if args.files.count("-") > 1:
        common.error("scan", "'-' (standard input) can be given only once")
        return common.USAGE_ERROR
    not_text = 0
    for path in args.files:
        stats, sniffed = _scan(path, matcher)
        if sniffed.kind != inputs.Kind.OK:
            not_text += 1
            common.error("scan", f"{path}: {sniffed.detail}")
        print(
            json.dumps(
                {
                    "path": path,
                    "input": sniffed.kind.value,
                    "lines": stats.lines,
                    "matched_lines": stats.matched_lines,
                    "patterns": stats.patterns,
                    "seconds": round(stats.seconds, 6),
                    "engine": matcher.engine,
                    "catalog_version": catalog.version,
                }
            ),
            flush=True,
        )
    return 1 if not_text else 0


def _scan(path: str, matcher: matchers.Matcher) -> tuple[matchers.ScanStats, inputs.Sniffed]:
    try:
        with inputs.open_input(path) as (handle, sniffed):
            return matcher.scan_stream(handle), sniffed
    except OSError as exc:
        return matchers.ScanStats(lines=0, matched_lines=0, patterns={}, seconds=0.0), inputs.Sniffed(
            inputs.Kind.UNREADABLE, inputs.reason(exc)
        )
