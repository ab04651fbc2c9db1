"""`trainguard operator`: the recovery loop as a Kubernetes operator (kopf).

A thin shell like ``cli/run.py``: it reads the settings (flags, environment, config file: one
definition in ``cli/config.py``, shared with ``trainguard run``) into one ``OperatorConfig`` and
hands it to ``trainguard.k8s.operator``, imported inside ``run`` so that the other sub-commands
never load kopf.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from trainguard.cli import common, config, settings_io


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "operator",
        help="run the recovery loop as a Kubernetes operator (RecoveryPolicy, WorkloadRecovery, Events)",
        description="Watch RecoveryPolicy objects, discover opted-in Slurm jobs, keep one WorkloadRecovery per "
        "job with the engine's view in its status, and post Events. Action needs two keys: --mode action (or "
        "TRAINGUARD_MODE=action) AND a policy whose mode is Action. Every setting is a flag, an environment "
        "variable TRAINGUARD_<NAME> or a key of the --config file, in that precedence. Credentials: $KUBECONFIG, "
        "else the pod's ServiceAccount.",
    )
    settings_io.add_arguments(parser, config.OperatorSettings)
    parser.add_argument("--allow-action", action=settings_io.ReplacedFlag,
                        replacement="--mode action (or TRAINGUARD_MODE=action)")
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective configuration (secrets redacted) as JSON and exit")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = settings_io.start(args, config.OperatorSettings, "trainguard operator")
    if isinstance(cfg, int):
        return cfg
    if cfg.log_level == "INFO":
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # one line per handler call otherwise
    if common.load_catalog("operator", cfg.patterns_file) is None:  # one line now, not a kopf traceback later
        return common.USAGE_ERROR
    from trainguard.cli import run as run_mod
    from trainguard.console import web as console_web
    from trainguard.k8s import operator

    try:
        gpu_metrics = run_mod.gpu_metrics_config(cfg)
    except ValueError as exc:
        print(f"trainguard operator: {exc}", file=sys.stderr)
        return common.USAGE_ERROR
    namespaces = cfg.namespaces()
    if not cfg.scheduler:
        print("trainguard operator: scheduler: required (--scheduler SPEC, repeatable)", file=sys.stderr)
        return common.USAGE_ERROR
    try:
        loki = run_mod.loki_config(cfg)
    except config.ConfigError as exc:  # an unreadable Loki secret file: one line
        print(f"trainguard operator: {exc}", file=sys.stderr)
        return common.USAGE_ERROR
    operator_config = operator.OperatorConfig(
        scheduler=",".join(cfg.scheduler),
        namespaces=namespaces,
        clusterwide=cfg.all_namespaces,
        workload_namespace=cfg.workload_namespace or (namespaces[0] if namespaces else None)
        or cfg.pod_namespace or "default",
        db_url=cfg.database_url(),
        peering=cfg.peering,
        liveness_endpoint=cfg.liveness,
        http_listen=cfg.http_listen,
        http_routes=tuple(console_web.routes()),
        http_token_file=cfg.http_token_file,
        engine=common.engine_settings(cfg),
        notify_config=cfg.notify_config,
        status_interval_s=cfg.status_interval,
        retention_s=cfg.retention,
        jwt=cfg.slurm_token_source(),
        scheduler_env=cfg.scheduler_env(),
        rest_fallback=cfg.rest_fallback,
        patterns_files=tuple(cfg.patterns_file),
        slinky_namespace=cfg.slinky_namespace,
        node_pool_label=cfg.node_pool_label,
        victorialogs=run_mod.victorialogs_config(cfg),
        loki=loki,
        gpu_metrics=gpu_metrics,
        shards=cfg.shards,
        shard_key=cfg.shard_key,
        replica_id=cfg.replica_id,
    )
    code: int = operator.main(operator_config)
    return code
