"""`trainguard policy validate FILE...` (or ``policy lint``): check RecoveryPolicy files offline, before they
reach Git or a cluster.

Shell over ``policy.loader`` (the loader ``trainguard run --policy`` uses, so a file that passes
here loads there) and ``policy.lint`` (contradictions the schema cannot see, e.g.
``drainLemonNodes`` without ``drainNode`` allowed). Nothing is contacted: no cluster, no scheduler.

Output: ``--format text`` one line per file (``FILE: ok: NAME (Monitor), ...``, ``FILE: invalid:
...``) and one line per warning (``FILE: warning: policy NAME: spec.field: ...``);
``--format json`` one object per file: ``path``, ``valid``, ``policies`` (``[{name, mode}]``),
``warnings`` (``[{policy, field, message}]``), ``error`` (string or null). Files are also checked
together, as ``run`` loads them: a policy name defined in two files makes the later file invalid.

Exit codes: 0 every file is valid (warnings are printed but do not fail, since a contradiction
is resolved safely at decision time); 1 only with ``--strict``, when there are warnings; 2 some
file is invalid or unreadable.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trainguard.cli import common


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "policy",
        help="check RecoveryPolicy files offline (schema and contradictions)",
        description="Work with RecoveryPolicy files without a cluster.",
    )
    actions = parser.add_subparsers(dest="policy_command", metavar="ACTION")
    for name in ("validate", "lint"):
        _add_validate(actions, name)
    parser.set_defaults(func=lambda args: _usage(parser))


def _add_validate(actions: Any, name: str) -> None:
    """``validate`` and its other name ``lint`` (what a policy linter is usually called): one command."""
    validate = actions.add_parser(
        name,
        help="validate RecoveryPolicy YAML files and warn about contradictions"
        + (" (the same as validate)" if name != "validate" else ""),
        description="Load each file with the same loader as 'trainguard run --policy' and report, per file, "
        "whether it is valid, which policies it defines, and settings that contradict each other "
        "(e.g. drainLemonNodes on but drainNode not allowed).",
        epilog="Exit status: 0 every file is valid (warnings do not fail unless --strict); 1 warnings with --strict; "
        "2 some file is invalid or unreadable.",
    )
    validate.add_argument("files", nargs="+", type=Path, metavar="FILE",
                          help="RecoveryPolicy YAML file (one or many documents)")
    common.add_format_argument(validate, json_help="one object per file", text_help="one line per file and per "
                               "warning")
    validate.add_argument("--strict", action="store_true", help="exit 1 when any policy has a warning")
    validate.set_defaults(func=run_validate)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return common.USAGE_ERROR


def run_validate(args: argparse.Namespace) -> int:
    from trainguard.policy import lint, loader  # here: keeps `trainguard --help` light

    invalid = warned = 0
    seen: dict[str, Path] = {}
    for path in args.files:
        report: dict[str, Any] = {"path": str(path), "valid": False, "policies": [], "warnings": [], "error": None}
        try:
            policies = loader.load_file(path).policies
            clash = next((p.name for p in policies if p.name in seen), None)
            if clash is not None:
                raise loader.PolicyError(f"{path}: policy name {clash!r} is already defined in {seen[clash]}")
        except loader.PolicyError as exc:
            invalid += 1
            report["error"] = " ".join(str(exc).split())
        else:
            report["valid"] = True
            for policy in policies:
                seen[policy.name] = path
                report["policies"].append({"name": policy.name, "mode": policy.spec.mode.value})
                for finding in lint.contradictions(policy):
                    report["warnings"].append({"policy": policy.name, **finding.to_json()})
            warned += len(report["warnings"])
        _print(report, args.format)
    if invalid:
        return common.USAGE_ERROR
    return 1 if warned and args.strict else 0


def _print(report: dict[str, Any], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps(report, ensure_ascii=False), flush=True)
        return
    path = report["path"]
    if not report["valid"]:
        message = report["error"]
        print(f"{path}: invalid: {message.removeprefix(path).lstrip(': ')}", flush=True)
        return
    names = ", ".join(f"{p['name']} ({p['mode']})" for p in report["policies"])
    print(f"{path}: ok: {names}", flush=True)
    for item in report["warnings"]:
        print(f"{path}: warning: policy {item['policy']}: {item['field']} {item['message']}", flush=True)
