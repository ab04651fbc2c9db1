"""`trainguard doctor`: check a configuration against the live cluster before (or while) it runs.

It reads the same settings as ``trainguard run`` (flags, ``TRAINGUARD_*``, ``--config``) and
checks each configured part: the policy and pattern files load; the scheduler answers and
slurmctld is configured as the loop needs (``JobRequeue``, ``AccountingStoreFlags``); slurmrestd's
version and token; the audit database (connect, schema revision, writable); VictoriaLogs / Loki
(reachable, auth, version, the fields that map lines to jobs, the newest line's age); Prometheus /
VictoriaMetrics (version, DCGM metrics per node, hostname label vs scheduler node names); with
``--slinky-namespace``, SchedMD's slurm-operator and the cordon path (``k8s.slinky_probe``); with the
scheduler ``kubernetes`` (alone or comma-separated beside a Slurm spec, as the chart passes it) the
apiserver, the RBAC the operator needs and the CRDs it serves (``k8s.kube_probe``); both with this
process's Kubernetes credentials (in a pod its ServiceAccount, else ``$KUBECONFIG``). What is not
configured is a warning that says so, never a failure.

Output: a table (status, check, message, and how to fix each warning or failure), or with
``--format json`` one JSON object ``{"checks": [{"name", "status", "message", "fix"?, "details"?}]}``.
Exit code 1 when any check failed, else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
from collections.abc import Awaitable
from typing import Any

from trainguard.cli import common, config, logsetup, settings_io

logger = logging.getLogger("trainguard.doctor")

KUBERNETES = "kubernetes"
"""The scheduler spec of JobSets and PyTorchJobs: checked against the apiserver (``_kubernetes``)."""
GROUP_FACTOR = 4
"""A group of checks (several requests, each within --check-timeout) gets this many timeouts."""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "doctor",
        help="check the configuration against the scheduler, database, log and metric stores",
        description="Check every configured endpoint (reachable, auth, version), the log streams' job fields "
        "and lag, the DCGM metrics per node and the hostname label, slurmctld's JobRequeue and "
        "AccountingStoreFlags, slurmrestd, the audit database and the policy files. Reads the same settings "
        "as 'trainguard run'. Exit code 1 when any check fails.",
    )
    settings_io.add_arguments(parser, config.DoctorSettings)
    common.add_format_argument(parser, json_help="one JSON object {\"checks\": [...]}",
                               text_help="a table with the fix below each warning or failure")
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective configuration (secrets redacted) as JSON and exit")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trainguard.doctor import report

    flags = settings_io.flags_of(args, config.DoctorSettings)
    logsetup.configure(logging.WARNING, str(flags.get("log_format") or "text"))
    try:
        cfg = settings_io.load(config.DoctorSettings, flags)
    except config.ConfigError as exc:
        checks = [report.fail("config", str(exc), "fix the setting named above (trainguard doctor --help)")]
        _print(checks, args.format)
        return 1
    # INFO would interleave the adapters' progress lines with the table
    logsetup.configure(logging.WARNING if cfg.log_level == "INFO" else cfg.log_level, cfg.log_format)
    if args.print_config:
        return settings_io.print_config(cfg, flags)
    checks = asyncio.run(run_checks(cfg))
    _print(checks, args.format)
    return 1 if report.failed(checks) else 0


def _print(checks: list[Any], fmt: str) -> None:
    from trainguard.doctor import report

    print(report.to_json(checks) if fmt == "json" else report.to_table(checks))


async def run_checks(cfg: config.DoctorSettings) -> list[Any]:
    """Every check of ``cfg``, concurrently, in a stable order; each time-boxed (``report.guarded``)."""
    import aiohttp

    from trainguard.doctor import database, listener, logs, metrics, report, slurm

    timeout = cfg.check_timeout
    group = timeout * GROUP_FACTOR
    checks: list[report.Check] = [report.ok("config", "settings loaded" + (f" from {cfg.config}" if cfg.config
                                                                             else " (flags and environment)"))]
    checks.extend(_files(cfg))
    checks.append(listener.check(cfg.http_listen, cfg.http_token_file))

    specs = [s.strip() for s in (cfg.scheduler or "").split(",") if s.strip()]
    kubernetes = KUBERNETES in specs
    slurm_spec = ",".join(s for s in specs if s != KUBERNETES)
    probe: slurm.SchedulerProbe | None = None
    if slurm_spec:
        probe = slurm.SchedulerProbe(
            slurm_spec, env=cfg.scheduler_env(), jwt=cfg.slurm_token(), rest_fallback=cfg.rest_fallback,
            client_keys=[str(k) for k in cfg.ssh_key] or None,
            known_hosts=str(cfg.known_hosts) if cfg.known_hosts else None, timeout=timeout)
        scheduler_task = asyncio.ensure_future(report.guarded("scheduler", probe.checks, group))
    elif kubernetes:
        scheduler_task = asyncio.ensure_future(_constant([]))
    else:
        scheduler_task = asyncio.ensure_future(_constant([report.warn(
            "scheduler", "not configured: Slurm checks skipped, DCGM hostnames not compared with node names",
            "set --scheduler / TRAINGUARD_SCHEDULER (slurm-local, slurm-ssh://USER@HOST, slurm-rest://HOST:PORT)")]))

    async with aiohttp.ClientSession() as session:
        tasks: list[Awaitable[list[report.Check]]] = [scheduler_task]
        tasks.append(report.guarded("database", lambda: database.checks(cfg.database_url()), group))
        if cfg.victorialogs_url:
            url = cfg.victorialogs_url
            tasks.append(report.guarded("victorialogs", lambda: logs.victorialogs(
                session, url, job_field=cfg.victorialogs_job_field, host_field=cfg.victorialogs_host_field,
                path_field=cfg.victorialogs_path_field, limit_s=timeout), group))
        else:
            tasks.append(_constant([_unset("victorialogs", "TRAINGUARD_VICTORIALOGS_URL / --victorialogs-url",
                                           "job output is not read from VictoriaLogs")]))
        if cfg.loki_url:
            loki_url = cfg.loki_url

            async def loki() -> list[report.Check]:
                try:
                    headers = _loki_headers(cfg)
                except config.ConfigError as exc:
                    return [report.fail("loki", str(exc), "fix the Loki secret file setting named above")]
                return await logs.loki(session, loki_url, job_label=cfg.loki_job_label, host_label=cfg.loki_host_label,
                                       path_label=cfg.loki_path_label, selector=cfg.loki_selector, headers=headers,
                                       limit_s=timeout)

            tasks.append(report.guarded("loki", loki, group))
        else:
            tasks.append(_constant([_unset("loki", "TRAINGUARD_LOKI_URL / --loki-url",
                                           "job output is not read from Loki")]))
        if cfg.prometheus_url:
            prom_url = cfg.prometheus_url

            async def prometheus() -> list[report.Check]:
                try:
                    node_regex = re.compile(cfg.prometheus_node_regex) if cfg.prometheus_node_regex else None
                except re.error as exc:
                    return [report.fail("prometheus", f"prometheus_node_regex {cfg.prometheus_node_regex!r}: {exc}",
                                        "fix --prometheus-node-regex / TRAINGUARD_PROMETHEUS_NODE_REGEX")]
                await asyncio.wait([scheduler_task])  # the node names, when the scheduler answered
                return await metrics.prometheus(
                    session, prom_url, hostname_label=cfg.prometheus_hostname_label,
                    scheduler_nodes=probe.nodes if probe else None, limit_s=timeout, node_regex=node_regex)

            tasks.append(report.guarded("prometheus", prometheus, group * 2))
        else:
            tasks.append(_constant([_unset("prometheus", "TRAINGUARD_PROMETHEUS_URL / --prometheus-url",
                                           "no GPU evidence from DCGM metrics")]))
        if cfg.slinky_namespace:
            namespace = cfg.slinky_namespace
            tasks.append(report.guarded("slinky", lambda: _slinky(namespace, call_s=timeout), group))
        if kubernetes:
            tasks.append(report.guarded("kubernetes.api", lambda: _kubernetes(call_s=timeout), group))
        for found in await asyncio.gather(*tasks):
            checks.extend(found)
    return checks


async def _slinky(namespace: str, *, call_s: float) -> list[Any]:
    """slurm-operator and the cordon path (``k8s.slinky_probe``), each API call within ``call_s``."""
    from trainguard.k8s import slinky_probe

    return await _with_kube("slinky", "the cluster that runs Slinky", lambda api: slinky_probe.probe(api, namespace),
                            call_s=call_s)


async def _kubernetes(*, call_s: float) -> list[Any]:
    """The apiserver, the operator's RBAC and CRDs (``k8s.kube_probe``), each API call within ``call_s``."""
    from trainguard.k8s import kube_probe

    target = kube_probe.Target.from_env(os.environ)
    return await _with_kube("kubernetes.api", "the cluster the operator serves",
                            lambda api: kube_probe.probe(api, target), call_s=call_s)


async def _with_kube(name: str, cluster: str, probe: Any, *, call_s: float) -> list[Any]:
    """``probe(api)``'s findings as checks, with this process's Kubernetes credentials (in a pod its
    ServiceAccount, else ``$KUBECONFIG``); credentials that do not load are one failed check ``name``."""
    from trainguard.doctor import report
    from trainguard.k8s import client

    try:
        api = await client.load_api_client()
    except Exception as exc:  # the library raises its own ConfigException, OSError, ValueError...
        where = "the pod's ServiceAccount" if client.in_cluster() else os.environ.get("KUBECONFIG") or "~/.kube/config"
        return [report.fail(name, f"no Kubernetes credentials from {where}: {type(exc).__name__}: {exc}",
                            f"set KUBECONFIG to {cluster}, or run doctor in the operator's pod")]
    api.timeout_s = call_s
    try:
        findings = await probe(api)
    finally:
        await api.close()
    return [report.Check(f.name, f.status, f.message, f.fix) for f in findings]


def _loki_headers(cfg: config.DoctorSettings) -> dict[str, str]:
    """The tenant and credentials headers the Loki source sends (secrets read from their files)."""
    from trainguard.signals import loki

    token, password = cfg.loki_secrets()
    return loki.LokiAuth(tenant=cfg.loki_tenant, bearer_token=token, username=cfg.loki_username,
                         password=password).headers()


async def _constant(checks: list[Any]) -> list[Any]:
    return checks


def _unset(name: str, setting: str, effect: str) -> Any:
    from trainguard.doctor import report

    return report.warn(name, f"not configured: {effect}", f"set {setting} to use it")


def _files(cfg: config.DoctorSettings) -> list[Any]:
    """``policies`` and ``patterns``: the files load as ``trainguard run`` would load them."""
    from trainguard.cli.run import load_policies
    from trainguard.detect import catalog as catalog_mod
    from trainguard.doctor import report
    from trainguard.policy import loader

    checks = []
    try:
        policies = load_policies(cfg.policy)
        names = ", ".join(p.name for p in policies.policies)
        origin = f"{len(cfg.policy)} file(s)" if cfg.policy else "built-in default (Monitor)"
        checks.append(report.ok("policies", f"{origin}: {names}"))
    except (loader.PolicyError, OSError) as exc:
        checks.append(report.fail("policies", str(exc), "fix the policy file (trainguard policy validate FILE)"))
    try:
        catalog = catalog_mod.load_catalog(extra_files=cfg.patterns_file)
        checks.append(report.ok("patterns", f"{len(catalog.patterns)} patterns"
                                + (f" ({len(cfg.patterns_file)} extra file(s))" if cfg.patterns_file else "")))
    except (catalog_mod.CatalogError, OSError) as exc:
        checks.append(report.fail("patterns", str(exc), "fix the patterns file (catalog schema: docs/patterns.md)"))
    return checks

