"""`trainguard detect`: not built yet (see the README's status table)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("detect", help="(not built yet)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print("trainguard detect: not built yet", file=sys.stderr)
    return 2
