"""`trainguard detect`: one verdict per log file, offline (``detect.static`` over the catalog).

Contract (``shared/mission.md``, checked from outside): with ``--format json`` one JSON object
per line per file, keys ``path``, ``symptom``, ``category``, ``attribution``, ``evidence``
(``{line, text, pattern}``, initiating line first), ``suspect_nodes``, ``suspect_ranks``.
``-`` reads standard input. A file that cannot be read gets a one-line error on stderr, the
other files are still processed, and the exit code is 1 (0 when every file was read).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, BinaryIO

from trainguard.detect import catalog, matcher, static, stream

MAX_EVIDENCE = 20
"""Evidence lines per file in the output (initiating first); the rest are counted, not shown."""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "detect",
        help="classify training log files: crash, hang, straggler or healthy, with first cause and suspects",
        description="Read whole log files and print one verdict per file: symptom, category, attribution, "
        "the evidence lines (initiating event first) and the suspect nodes/ranks.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="log file to analyse; '-' for standard input")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    parser.add_argument(
        "--patterns-file",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="extra catalog patterns (YAML, catalog schema); repeatable",
    )
    parser.add_argument(
        "--progress-regex",
        default=None,
        metavar="REGEX",
        help="regex of the trainer's progress line (named groups step, rate, seconds)",
    )
    parser.add_argument("--engine", default="auto", choices=("auto", *matcher.ENGINES), help="matcher engine")
    parser.add_argument(
        "--max-evidence",
        type=int,
        default=MAX_EVIDENCE,
        metavar="N",
        help=f"evidence lines shown per file (default {MAX_EVIDENCE})",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        cat = catalog.load_catalog(extra_files=args.patterns_file)
        compiled = matcher.build_matcher(cat, engine=args.engine)
        settings = stream.DetectionSettings(progress_regex=args.progress_regex)
        static.FileAnalyzer(compiled, settings)  # validates the progress regex before any file is read
    except (catalog.CatalogError, matcher.MatcherError, ValueError) as exc:
        print(f"trainguard detect: {exc}", file=sys.stderr)
        return 2
    failed = 0
    for path in args.paths:
        try:
            result = _analyze(path, compiled, settings)
        except OSError as exc:
            failed += 1
            reason = exc.strerror or str(exc)
            print(f"trainguard detect: {path}: {reason}", file=sys.stderr)
            continue
        if args.format == "json":
            print(json.dumps(result.to_json(args.max_evidence), ensure_ascii=False), flush=True)
        else:
            print(_text(result, args.max_evidence), flush=True)
    return 1 if failed else 0


def _analyze(path: str, compiled: stream.Matcher, settings: stream.DetectionSettings) -> static.Result:
    analyzer = static.FileAnalyzer(compiled, settings)
    if path == "-":
        return analyzer.analyze("-", sys.stdin.buffer)
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(21, "is a directory", path)
    handle: BinaryIO
    with target.open("rb") as handle:
        return analyzer.analyze(path, handle)


def _text(result: static.Result, max_evidence: int) -> str:
    head = f"{result.path}: {result.symptom.value}"
    if result.symptom.value != "healthy":
        head += f" ({result.category.value}, attribution {result.attribution.value})"
    if result.suspect_nodes or result.suspect_ranks:
        head += f"; suspects: nodes {', '.join(result.suspect_nodes) or '-'}, "
        head += f"ranks {', '.join(str(r) for r in result.suspect_ranks) or '-'}"
    lines = [head]
    if result.summary:
        lines.append(f"  {result.summary}")
    shown = result.evidence[:max_evidence]
    for index, item in enumerate(shown):
        marker = "first cause" if index == 0 and result.symptom.value in ("crash", "hang") else item.pattern
        lines.append(f"  line {item.line:>7} [{marker}] {item.text[:300]}")
    if len(result.evidence) > len(shown):
        lines.append(f"  ... {len(result.evidence) - len(shown)} more evidence lines")
    if result.context:
        lines.append(f"  context (not a failure): {len(result.context)} lines, e.g.")
        lines.extend(f"  line {c.line:>7} [{c.pattern}] {c.text[:300]}" for c in result.context[:3])
    return "\n".join(lines)
