"""`trainguard operator`: the recovery loop as a Kubernetes operator (kopf).

A thin shell like ``cli/run.py``: it parses flags and environment into one
``OperatorConfig`` and hands it to ``trainguard.k8s.operator``, imported inside ``run`` so that
the other sub-commands never load kopf.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from trainguard import settings as settings_mod
from trainguard.cli import common
from trainguard.store import location

ACTIONS_ENV = "TRAINGUARD_ACTIONS_ENABLED"
"""Environment form of --allow-action (manifests/base/deployment.yaml sets it to "false")."""
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "operator",
        help="run the recovery loop as a Kubernetes operator (RecoveryPolicy, WorkloadRecovery, Events)",
        description="Watch RecoveryPolicy objects, discover opted-in Slurm jobs, keep one WorkloadRecovery per "
        "job with the engine's view in its status, and post Events. Monitor mode unless --allow-action (or "
        f"{ACTIONS_ENV}=true) AND the policy says Action. Credentials: $KUBECONFIG, else the pod's ServiceAccount.",
    )
    parser.add_argument("--scheduler", default="slurm-local", metavar="SPEC",
                        help="slurm-local | slurm-ssh://USER@HOST[:PORT] | slurm-rest://HOST:PORT "
                        "(default: slurm-local, i.e. scontrol/squeue with $SLURM_CONF and $SLURM_JWT)")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--namespace", "-n", action="append", default=[], metavar="NS",
                       help="namespace whose RecoveryPolicy/WorkloadRecovery objects are served (repeatable; "
                       "default: $POD_NAMESPACE, else 'default')")
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="serve every namespace")
    parser.add_argument("--workload-namespace", default=None, metavar="NS",
                        help="where WorkloadRecovery objects of Slurm jobs are created (default: the first "
                        "--namespace, else $POD_NAMESPACE, else 'default')")
    parser.add_argument("--allow-action", action="store_true", default=None,
                        help=f"cluster-wide Action switch (default: off, or ${ACTIONS_ENV}); policies in Action "
                        "mode act only when it is on")
    parser.add_argument("--db", default=location.DEFAULT_DB_URL, metavar="URL",
                        help=f"audit database URL (default: {location.DEFAULT_DB_URL})")
    single = parser.add_mutually_exclusive_group()
    single.add_argument("--standalone", action="store_true", default=True,
                        help="one instance, no peering (the default; deploy one replica with strategy Recreate)")
    single.add_argument("--peering", metavar="NAME", default=None,
                        help="several replicas, one active: act only while holding the coordination.k8s.io Lease "
                        "NAME in the workload namespace (needs RBAC on leases, see docs/operator.md)")
    parser.add_argument("--liveness", metavar="URL", default=None,
                        help="kopf liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument("--poll", type=float, default=settings_mod.EngineSettings.discovery_interval_s,
                        metavar="SECONDS", help="seconds between job listings (default: %(default)s)")
    parser.add_argument("--status-interval", type=float, default=2.0, metavar="SECONDS",
                        help="seconds between WorkloadRecovery reconcile rounds (default: %(default)s)")
    parser.add_argument("--retention", type=float, default=3600.0, metavar="SECONDS",
                        help="keep a WorkloadRecovery this long after its job is no longer tracked "
                        "(default: %(default)s)")
    parser.add_argument("--jwt", default=None, help="slurmrestd token (default: $SLURM_JWT)")
    parser.add_argument("--rest-fallback", default="slurm-local", metavar="SPEC",
                        help="CLI transport for what slurmrestd cannot do, e.g. requeue (default: slurm-local)")
    parser.add_argument("--patterns-file", type=Path, action="append", default=[], metavar="FILE",
                        help="extra catalog patterns (YAML, catalog schema); repeatable")
    parser.add_argument("--slinky-namespace", default=None, metavar="NS",
                        help="namespace of a Slinky cluster's slurmd pods: lemon nodes of Action-mode advice are "
                        "cordoned in Kubernetes (policy must allow cordonNode); needs manifests/slinky")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="log verbosity on stderr (default: INFO)")
    parser.set_defaults(func=run)


def _actions_enabled(flag: bool | None) -> bool:
    if flag:
        return True
    value = os.environ.get(ACTIONS_ENV, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{ACTIONS_ENV} must be true or false, got {value!r}")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, args.log_level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    if args.log_level == "INFO":
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # one line per handler call otherwise
    for flag, value in (("--poll", args.poll), ("--status-interval", args.status_interval),
                        ("--retention", args.retention)):
        if value <= 0:
            print(f"trainguard operator: {flag} must be > 0", file=sys.stderr)
            return 2
    try:
        allow_action = _actions_enabled(args.allow_action)
    except ValueError as exc:
        print(f"trainguard operator: {exc}", file=sys.stderr)
        return 2
    if common.load_catalog("operator", args.patterns_file) is None:  # one line now, not a kopf traceback later
        return common.USAGE_ERROR
    own = os.environ.get("POD_NAMESPACE") or "default"
    namespaces = tuple(args.namespace) if not args.all_namespaces else ()
    if not namespaces and not args.all_namespaces:
        namespaces = (own,)
    from trainguard.k8s import operator

    config = operator.OperatorConfig(
        scheduler=args.scheduler,
        namespaces=namespaces,
        clusterwide=args.all_namespaces,
        workload_namespace=args.workload_namespace or (namespaces[0] if namespaces else own),
        allow_action=allow_action,
        db_url=args.db,
        peering=args.peering,
        liveness_endpoint=args.liveness,
        poll_s=args.poll,
        status_interval_s=args.status_interval,
        retention_s=args.retention,
        jwt=args.jwt,
        rest_fallback=args.rest_fallback,
        patterns_files=tuple(args.patterns_file),
        slinky_namespace=args.slinky_namespace,
    )
    code: int = operator.main(config)
    return code
