"""`trainguard scan --stats FILE`: the raw matcher over a whole file, no detection logic.

Shell over ``detect.matcher.Matcher.scan_file``. The output is a contract
(``shared/mission.md``): one JSON object with ``lines``, ``matched_lines``, ``patterns``
(id -> lines) and ``seconds``, plus ``engine`` and ``catalog_version``; ``matched_lines``
equals ``rg -c -f <(trainguard patterns export --format lines) FILE``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trainguard.detect import catalog as catalogs
from trainguard.detect import matcher as matchers


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("scan", help="count catalog matches in a file (raw matcher, no detection)")
    parser.add_argument("file", type=Path, metavar="FILE", help="log file to scan")
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
    path: Path = args.file
    if not path.is_file():
        reason = "is a directory" if path.is_dir() else "does not exist"
        print(f"trainguard scan: {path}: {reason}", file=sys.stderr)
        return 2
    try:
        catalog = catalogs.load_catalog(extra_files=args.patterns_file)
        matcher = matchers.build_matcher(catalog, args.engine)
    except (catalogs.CatalogError, matchers.MatcherError) as exc:
        print(f"trainguard scan: {exc}", file=sys.stderr)
        return 2
    try:
        stats = matcher.scan_file(path)
    except OSError as exc:
        print(f"trainguard scan: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(
        json.dumps(
            {
                "lines": stats.lines,
                "matched_lines": stats.matched_lines,
                "patterns": stats.patterns,
                "seconds": round(stats.seconds, 6),
                "engine": matcher.engine,
                "catalog_version": catalog.version,
            }
        )
    )
    return 0
