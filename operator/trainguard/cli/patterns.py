"""`trainguard patterns`: export, list and self-test the pattern catalog.

Shell over ``detect.catalog`` and ``detect.matcher``. ``export --format lines`` is a contract
(docs/cli.md; scripts depend on it): exactly the regexes the matcher compiles, one per line,
catalog order, so ``rg -c -f <(trainguard patterns export --format lines) FILE`` counts what
``scan`` counts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from trainguard.detect import catalog as catalogs
from trainguard.detect import matcher as matchers


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
    listing.add_argument("--format", choices=("table", "json"), default="table",
                         help="table: aligned columns (default); json: one object per line")
    common(listing)
    listing.set_defaults(func=run_list)

    test = actions.add_parser("test", help="run every example and counter-example; exit 1 on a failure")
    test.add_argument("--engine", choices=("auto", *matchers.ENGINES), default="auto",
                      help="matcher engine to test the examples with (default: the fastest installed)")
    common(test)
    test.set_defaults(func=run_test)

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
    for spec in catalog.patterns:
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
    print(f"{checked} lines checked with engine {matcher.engine}: {failures} failure(s)")
    return 1 if failures else 0
