"""`trainguard patterns`: export, list and self-test the pattern catalog; show which entries fired.

Shell over ``detect.catalog`` and ``detect.matcher`` (and ``store`` for ``fired``, read-only).
``export --format lines`` is a contract (docs/cli.md; scripts depend on it): exactly the regexes
the matcher compiles, one per line, catalog order, so
``rg -c -f <(trainguard patterns export --format lines) FILE`` counts what ``scan`` counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from trainguard.cli import common
from trainguard.cli.common import add_format_argument, add_settings_database_arguments, timestamp
from trainguard.detect import catalog as catalogs
from trainguard.detect import first_cause, hosts, sanitize, static, stream
from trainguard.detect import matcher as matchers
from trainguard.model import anomalies, signals, vocab

if TYPE_CHECKING:
    from trainguard.store import audit


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("patterns", help="export, list or test the failure-pattern catalog")
    actions = parser.add_subparsers(dest="patterns_command", metavar="ACTION")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--patterns-file",
            action="append",
            type=Path,
            default=[],
            metavar="FILE",
            help="operator patterns (YAML, catalog schema) added after the built-in ones; repeatable",
        )

    export = actions.add_parser("export", help="print the catalog's regexes or entries")
    export.add_argument("--format", choices=("lines", "yaml", "json"), default="lines",
                        help="lines: one regex per line, for rg -f / grep -E -f (default); yaml or json: the "
                        "whole catalog entries, loadable again with --patterns-file")
    common(export)
    export.set_defaults(func=run_export)

    listing = actions.add_parser("list", help="table of id, category, attribution hint, severity")
    add_format_argument(listing, json_help="one object per line", text_help="aligned columns")
    common(listing)
    listing.set_defaults(func=run_list)

    test = actions.add_parser(
        "test", help="run every example and counter-example; exit 1 on a failure",
        description="Check every entry's examples (must match) and counter-examples (must not). An error or "
        "fatal entry from --patterns-file must also decide its own examples: read alone, each example's first "
        "cause is the entry's category (else a built-in entry shadows it). SAMPLE files (your own logs) are "
        "printed line by line with the ids that match.",
    )
    test.add_argument("--engine", choices=("auto", *matchers.ENGINES), default="auto",
                      help="matcher engine to test the examples with (default: the fastest installed)")
    test.add_argument("--only", metavar="PREFIX", default="",
                      help="test only entries whose id starts with PREFIX (e.g. 'site.' for your own)")
    test.add_argument("samples", nargs="*", type=Path, metavar="SAMPLE",
                      help="log files to show matches for: each matched line as FILE:LINE: ids | text")
    common(test)
    test.set_defaults(func=run_test)

    fired = actions.add_parser(
        "fired", help="which patterns fired on which workloads (from the recorded anomalies)",
        description="Count, per pattern id, the recorded anomalies whose evidence cites it, how often it was the "
        "first cause, and on which workloads. Read-only: the database is never created or changed.",
    )
    add_settings_database_arguments(fired)
    fired.add_argument("--since", type=timestamp, metavar="ISO",
                       help="only anomalies at or after this time (ISO 8601; no offset means UTC)")
    fired.add_argument("--workload", metavar="ID", help="only anomalies of this workload")
    add_format_argument(fired, json_help="one object per line (pattern, anomalies, first_cause, workloads, "
                               "first, last)", text_help="aligned columns")
    fired.set_defaults(func=run_fired)

    parser.set_defaults(func=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _load(args: argparse.Namespace) -> catalogs.Catalog | None:
    try:
        return catalogs.load_catalog(extra_files=args.patterns_file)
    except catalogs.CatalogError as exc:
        print(f"trainguard patterns: {exc}", file=sys.stderr)
        return None


def run_export(args: argparse.Namespace) -> int:
    catalog = _load(args)
    if catalog is None:
        return 2
    if args.format == "lines":
        sys.stdout.write("".join(spec.regex + "\n" for spec in catalog.patterns))
        return 0
    document = {
        "version": catalog.version,
        "patterns": [spec.model_dump(mode="json", exclude_defaults=True) for spec in catalog.patterns],
    }
    if args.format == "json":
        print(json.dumps(document, indent=2))
    else:
        sys.stdout.write(yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=200))
    return 0


def run_list(args: argparse.Namespace) -> int:
    catalog = _load(args)
    if catalog is None:
        return 2
    rows = [
        {"id": s.id, "category": str(s.category), "attribution": str(s.attribution_hint), "severity": str(s.severity)}
        for s in catalog.patterns
    ]
    if args.format == "json":
        for row in rows:
            print(json.dumps(row))
        return 0
    headers = {"id": "ID", "category": "CATEGORY", "attribution": "ATTRIBUTION", "severity": "SEVERITY"}
    widths = {key: max(len(headers[key]), *(len(row[key]) for row in rows)) for key in headers}
    for row in [headers, *rows]:
        print("  ".join(row[key].ljust(widths[key]) for key in headers).rstrip())
    print(f"\n{len(rows)} patterns, catalog version {catalog.version}")
    return 0


def run_test(args: argparse.Namespace) -> int:
    catalog = _load(args)
    if catalog is None:
        return 2
    try:
        matcher = matchers.build_matcher(catalog, args.engine)
    except matchers.MatcherError as exc:
        print(f"trainguard patterns test: {exc}", file=sys.stderr)
        return 2
    failures = 0
    checked = 0
    own = {spec.id for path in args.patterns_file for spec in catalogs.load_file(path)}
    hints = {spec.id: spec.attribution_hint for spec in catalog.patterns}
    for spec in catalog.patterns:
        if not spec.id.startswith(args.only):
            continue
        for problem in catalogs.agreement_problems(spec.regex):
            print(f"warning: {spec.id}: {problem}", file=sys.stderr)
        for line in spec.examples:
            checked += 1
            if spec.id not in matcher.match(line):
                failures += 1
                print(f"FAIL {spec.id}: example does not match: {line!r}")
        for line in spec.counter_examples:
            checked += 1
            if spec.id in matcher.match(line):
                failures += 1
                print(f"FAIL {spec.id}: counter-example matches: {line!r}")
        if spec.id in own and spec.severity in (vocab.Severity.FATAL, vocab.Severity.ERROR):
            for line in spec.examples:
                decided = _first_cause(matcher, catalog, hints, line)
                if decided is not None and decided.category != spec.category:
                    failures += 1
                    print(f"FAIL {spec.id}: example is read as {decided.category.value} "
                          f"(decided by {decided.pattern}), not {spec.category.value}: {line!r}")
    print(f"{checked} lines checked with engine {matcher.engine}: {failures} failure(s)")
    for path in args.samples:
        if not _show_matches(matcher, path):
            return 2
    return 1 if failures else 0


def _first_cause(
    matcher: matchers.Matcher, catalog: catalogs.Catalog, hints: dict[str, vocab.Attribution], line: str
) -> anomalies.Evidence | None:
    """The initiating evidence ``detect`` would pick for ``line`` read alone (None: no cause)."""
    text = sanitize.clean_line(line.encode())
    prefix = hosts.parse_prefix(text)
    log_line = signals.LogLine(text=text, lineno=1, received_at=0.0)
    evidence = [
        stream.evidence_from_hit(catalog.by_id[pid], log_line, prefix, matcher.extract(pid, text), at=None)
        for pid in matcher.match(text)
        if pid in catalog.by_id
    ]
    found = first_cause.find_first_cause(evidence, hints=hints)
    return found.initiating if found is not None else None


def _show_matches(matcher: matchers.Matcher, path: Path) -> bool:
    """``FILE:LINE: id,id | text`` for every matched line of one sample log; False if unreadable."""
    try:
        with path.open("rb") as handle:
            for lineno, raw in enumerate(static.read_lines(handle), start=1):
                text = sanitize.clean_line(raw)
                if ids := matcher.match(text):
                    print(f"{path}:{lineno}: {','.join(ids)} | {text[:300]}")
    except OSError as exc:
        print(f"trainguard patterns test: {path}: cannot read: {exc.strerror or exc}", file=sys.stderr)
        return False
    return True


async def _fired(args: argparse.Namespace) -> list[audit.PatternFiring]:
    from trainguard.store import database  # here, not at the top: keeps `trainguard --help` light

    store = await database.open_store(args.db, readonly=True)
    try:
        return await store.fired_patterns(since=args.since, workload=args.workload)
    finally:
        await store.close()


def run_fired(args: argparse.Namespace) -> int:
    from trainguard.store import database

    args.db = common.settings_database_url(args, "patterns fired")
    if args.db is None:
        return common.USAGE_ERROR
    try:
        found = asyncio.run(_fired(args))
    except database.StoreError as exc:
        print(f"trainguard patterns fired: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        for item in found:
            print(json.dumps(item.to_json(), sort_keys=True))
        return 0
    rows = [("PATTERN", "ANOMALIES", "FIRST-CAUSE", "WORKLOADS")]
    for item in found:
        workloads = ", ".join(f"{name} ({count})" for name, count in sorted(item.workloads.items()))
        rows.append((item.pattern, str(item.anomalies), str(item.first_cause), workloads))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[3]]).rstrip())
    return 0
