"""Checks of the scheduler: reachable through the configured transport, and slurmctld configured
the way the recovery loop needs it.

- ``JobRequeue=1``: with 0, a batch job is not requeueable unless it was submitted with
  ``--requeue``, and ``scontrol requeue`` (our main recovery) is refused.
- ``AccountingStoreFlags`` containing ``job_comment`` when accounting is on: the opt-in and the
  per-job overrides live in the job comment; without the flag slurmdbd drops the comment, so a
  finished job's opt-in is gone once slurmctld forgets the job (``MinJobAge``).
- slurmrestd (``slurm-rest://``): its Slurm release, the API version we will use, and that the
  JWT is accepted.

The adapters of ``schedulers/`` are reused: the same transport as ``trainguard run``, argv lists
only, no shell.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from trainguard.doctor.report import Check, fail, ok, warn
from trainguard.schedulers import base, factory, slurm_local, slurm_rest

SETTING = "--scheduler / TRAINGUARD_SCHEDULER"


@dataclasses.dataclass
class SchedulerProbe:
    """The inputs of the scheduler checks and what they learn for the others (the node names)."""

    spec: str
    env: Mapping[str, str]
    jwt: str | None = None
    rest_fallback: str = "slurm-local"
    client_keys: Sequence[str] | None = None
    known_hosts: str | None = None
    timeout: float = 10.0
    nodes: list[str] | None = None
    """Node names, once the scheduler answered (None: unknown)."""

    async def checks(self) -> list[Check]:
        try:
            fallback = None
            if self.spec.startswith("slurm-rest:") and self.rest_fallback != "none":
                fallback = factory.open_scheduler(self.rest_fallback, env=self.env, timeout=self.timeout)
            scheduler = factory.open_scheduler(self.spec, env=self.env, jwt=self.jwt, fallback=fallback,
                                               timeout=self.timeout, client_keys=self.client_keys,
                                               known_hosts=self.known_hosts)
        except (ValueError, OSError, base.SchedulerError) as exc:
            name = "slurmrestd" if self.spec.startswith("slurm-rest:") else "scheduler"
            return [fail(name, str(exc), f"fix {SETTING} (forms: {factory.FORMS}); slurm-local needs Slurm's "
                         "client commands on PATH and SLURM_CONF; slurm-rest needs SLURM_JWT / --jwt-file")]
        try:
            if isinstance(scheduler, slurm_rest.SlurmRest):
                return await self._rest(scheduler, fallback)
            return await self._cli(scheduler)
        finally:
            await scheduler.close()

    async def _nodes(self, scheduler: base.Scheduler) -> list[str]:
        self.nodes = sorted(n.name for n in await scheduler.list_nodes())
        return self.nodes

    async def _cli(self, scheduler: base.Scheduler) -> list[Check]:
        assert isinstance(scheduler, slurm_local.SlurmCommandScheduler)
        try:
            config = await scheduler.show_config()
            nodes = await self._nodes(scheduler)
        except base.SchedulerError as exc:
            return [fail("scheduler", str(exc), "check that slurmctld runs and that SLURM_CONF (slurm-local) or "
                         "the SSH target (slurm-ssh) addresses the right cluster")]
        about = f"Slurm {config.get('SLURM_VERSION', '?')}, cluster {config.get('ClusterName', '?')}"
        return [ok("scheduler", f"{self.spec}: {about}, {len(nodes)} nodes ({_names(nodes)})"),
                *config_checks(config)]

    async def _rest(self, scheduler: slurm_rest.SlurmRest, fallback: base.Scheduler | None) -> list[Check]:
        checks: list[Check] = []
        try:
            version = await scheduler.api_version()
            release = await scheduler.ping()
            nodes = await self._nodes(scheduler)
        except base.SchedulerError as exc:
            rejected = "token rejected" in str(exc) or "Unspecified" in str(exc)
            fix = ("give a valid, unexpired JWT (scontrol token; SLURM_JWT or --jwt-file)" if rejected else
                   f"check {SETTING}: host and port of slurmrestd, and that it runs")
            return [fail("slurmrestd", str(exc), fix)]
        checks.append(ok("slurmrestd", f"{scheduler.name}: Slurm {release}, API {version}, token accepted"))
        checks.append(ok("scheduler", f"{self.spec}: {len(nodes)} nodes ({_names(nodes)})"))
        if not isinstance(fallback, slurm_local.SlurmCommandScheduler):
            checks.append(warn("slurm.config", "slurmrestd does not show slurmctld's configuration and no CLI "
                               "fallback is configured: JobRequeue and AccountingStoreFlags not checked",
                               "set --rest-fallback to slurm-local or slurm-ssh://USER@HOST (requeue needs it "
                               "on slurmrestd before v0.0.45 as well)"))
            return checks
        try:
            config = await fallback.show_config()
        except base.SchedulerError as exc:
            checks.append(fail("slurm.config", f"rest fallback {fallback.name}: {exc}",
                               "check --rest-fallback: it must reach the same cluster"))
            return checks
        return [*checks, *config_checks(config)]


def config_checks(config: Mapping[str, str]) -> list[Check]:
    """``slurm.JobRequeue`` and ``slurm.job_comment`` from ``scontrol show config``."""
    checks: list[Check] = []
    requeue = config.get("JobRequeue", "").strip()
    if requeue == "1":
        checks.append(ok("slurm.JobRequeue", "JobRequeue=1: batch jobs can be requeued"))
    else:
        checks.append(fail("slurm.JobRequeue", f"JobRequeue={requeue or '(not shown)'}: jobs are not requeueable "
                           "unless submitted with --requeue, so the requeue recovery is refused",
                           "set JobRequeue=1 in slurm.conf and run scontrol reconfigure (or submit opted-in "
                           "jobs with sbatch --requeue)"))
    storage = config.get("AccountingStorageType", "").strip()
    flags = config.get("AccountingStoreFlags", "")
    legacy = config.get("AccountingStoreJobComment", "").strip().lower() == "yes"
    stored = "job_comment" in flags.lower() or legacy
    if storage in ("", "(null)", "accounting_storage/none"):
        checks.append(ok("slurm.job_comment", f"AccountingStorageType={storage or 'none'}: no accounting "
                         "database; the opt-in comment is read from slurmctld"))
    elif stored:
        checks.append(ok("slurm.job_comment", f"AccountingStoreFlags={flags.strip()}: {storage} keeps job comments"))
    else:
        checks.append(warn("slurm.job_comment", f"AccountingStorageType={storage} but AccountingStoreFlags="
                           f"{flags.strip() or '(null)'} lacks job_comment: the accounting database drops the "
                           "opt-in comment, so a finished job's opt-in and overrides are lost once slurmctld "
                           "forgets it (MinJobAge)", "add job_comment to AccountingStoreFlags in slurm.conf and "
                           "restart slurmctld"))
    return checks


def _names(nodes: Sequence[str]) -> str:
    return ", ".join(nodes[:6]) + (" ..." if len(nodes) > 6 else "")
