"""`trainguard detect`: one verdict per log file, offline (``detect.static`` over the catalog).

Contract (docs/cli.md; checked by users' scripts, keep it stable): with ``--format json`` one JSON
object per line per input, in argument order, keys ``path``, ``symptom``, ``category``,
``attribution``, ``evidence`` (``{line, text, pattern}``, initiating line first), ``suspect_nodes``,
``suspect_ranks``, and ``input`` (``ok`` | ``empty`` | ``binary`` | ``unreadable``, see
``detect.inputs``); nothing else (tests hold the key set). What was measured (a silence, a slow
rank's figures) or why the log alone cannot tell is the text format's second line. ``-`` reads
standard input.

An input that is not a readable text log is reported as such, never as a clean bill of health:
nothing (or not everything) was read, so where no failure was found its ``attribution`` is
``unknown`` and the text format says ``unknown`` (docs/safety.md). The JSON ``symptom`` keeps the
contract's four values (``crash|hang|straggler|healthy``, ../shared/mission.md: scripts check it),
so there it stays ``healthy`` (no failure found) and ``input`` says what was not read; one line on
stderr says why, the other inputs are still processed, and the exit code is 1. Exit 0: every input
was read as text. Exit 2: a problem with the command line or a ``--patterns-file`` (one line on
stderr; nothing was read).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any, BinaryIO

from trainguard.cli import common, progressbar
from trainguard.detect import inputs, matcher, static, stream
from trainguard.model import vocab

UNKNOWN = "unknown"
"""The symptom of an input that is not a text log and showed no failure: nothing (or not all of it)
could be read, so "healthy" would be a verdict on what was never looked at."""
MAX_EVIDENCE = 20
"""Evidence lines per file in the output (initiating first); the rest are counted, not shown."""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "detect",
        help="classify training log files: crash, hang, straggler or healthy, with first cause and suspects",
        description="Read whole log files and print one verdict per file: symptom, category, attribution, "
        "the evidence lines (initiating event first) and the suspect nodes/ranks.",
        epilog="Exit status: 0 every input was read as a text log; 1 some input was empty, binary or unreadable "
        "(reported as such on stderr and in the 'input' field, never as healthy; the others are still analysed); "
        "2 bad arguments or --patterns-file (nothing read).",
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
    cat = common.load_catalog("detect", args.patterns_file)
    if cat is None:
        return common.USAGE_ERROR
    try:
        compiled = matcher.build_matcher(cat, engine=args.engine)
        settings = stream.DetectionSettings(progress_regex=args.progress_regex)
        static.FileAnalyzer(compiled, settings)  # validates the progress regex before any file is read
    except (matcher.MatcherError, ValueError) as exc:
        common.error("detect", str(exc))
        return common.USAGE_ERROR
    if args.paths.count("-") > 1:
        common.error("detect", "'-' (standard input) can be given only once")
        return common.USAGE_ERROR
    not_text = 0
    for path in args.paths:
        result, sniffed = _analyze(path, compiled, settings)
        if sniffed.kind != inputs.Kind.OK:
            not_text += 1
            common.error("detect", f"{path}: {sniffed.detail}")
        if args.format == "json":
            document = result.to_json(args.max_evidence) if result else _nothing(path).to_json(0)
            document["input"] = sniffed.kind.value
            if sniffed.kind != inputs.Kind.OK and document["symptom"] == vocab.Symptom.HEALTHY.value:
                document["attribution"] = UNKNOWN  # the symptom vocabulary is the contract's (module doc)
            print(json.dumps(document, ensure_ascii=False), flush=True)
        elif result is None:
            print(f"{path}: not analysed ({sniffed.kind.value} input)", flush=True)
        else:
            print(_text(result, args.max_evidence, sniffed.kind), flush=True)
    return 1 if not_text else 0


def _analyze(
    path: str, compiled: stream.Matcher, settings: stream.DetectionSettings
) -> tuple[static.Result | None, inputs.Sniffed]:
    """The verdict on one input (None when nothing could be read as text) and what the input held."""
    analyzer = static.FileAnalyzer(compiled, settings)
    try:
        with inputs.open_input(path) as (handle, sniffed):
            if sniffed.kind == inputs.Kind.EMPTY or sniffed.skip:
                return None, sniffed
            if not sys.stderr.isatty():
                return analyzer.analyze(path, handle), sniffed
            bar = progressbar.ProgressBar(sys.stderr, f"detect {path}", _size(handle))
            try:
                return analyzer.analyze(path, handle, on_progress=bar.update), sniffed
            finally:
                bar.close()
    except OSError as exc:
        return None, inputs.Sniffed(inputs.Kind.UNREADABLE, inputs.reason(exc))


def _size(handle: BinaryIO) -> int | None:
    """Bytes in a regular file (for the progress bar's percentage); None for a pipe or a device."""
    try:
        info = os.fstat(handle.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _nothing(path: str) -> static.Result:
    """The verdict fields of an input with nothing analysed: no failure found, because none was looked for."""
    return static.Result(path, vocab.Symptom.HEALTHY, vocab.Category.NONE, vocab.Attribution.NONE)


def _text(result: static.Result, max_evidence: int, kind: inputs.Kind = inputs.Kind.OK) -> str:
    symptom = UNKNOWN if kind != inputs.Kind.OK and result.symptom == vocab.Symptom.HEALTHY else result.symptom.value
    head = f"{result.path}: {symptom}"
    if result.symptom.value != "healthy":
        head += f" ({result.category.value}, attribution {result.attribution.value})"
    if result.suspect_nodes or result.suspect_ranks:
        head += f"; suspects: nodes {', '.join(result.suspect_nodes) or '-'}, "
        head += f"ranks {', '.join(str(r) for r in result.suspect_ranks) or '-'}"
    if kind != inputs.Kind.OK:
        head += f" [{kind.value} input]"
    lines = [head]
    if result.summary:
        lines.append(f"  {result.summary}")
    shown = result.evidence[:max_evidence]
    for index, item in enumerate(shown):
        first = index == 0 and result.symptom.value in ("crash", "hang") and not item.pattern.startswith("postmortem.")
        marker = "first cause" if first else item.pattern  # a measured silence has no first-cause line
        lines.append(f"  line {item.line:>7} [{marker}] {item.text[:300]}")
    if len(result.evidence) > len(shown):
        lines.append(f"  ... {len(result.evidence) - len(shown)} more evidence lines")
    if result.context:
        lines.append(f"  context (not a failure): {len(result.context)} lines, e.g.")
        lines.extend(f"  line {c.line:>7} [{c.pattern}] {c.text[:300]}" for c in result.context[:3])
    return "\n".join(lines)
