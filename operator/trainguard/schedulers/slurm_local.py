"""The Slurm CLI scheduler: ``scontrol``/``squeue``/``scancel`` through a ``runner.Runner``.

This is the ``slurm-local`` transport (``runner.LocalRunner`` on this host) and, with the SSH
runner of ``slurm_ssh``, the ``slurm-ssh`` transport. It implements ``base.Scheduler`` for
the executor (``act/``) and job discovery (``signals/discovery``); parsing lives in
``slurm_cli``. Works with Slurm 22.05 (Debian 12) and 24.11 (Debian 13): ``squeue --json``
on both, ``scontrol --json`` from 23.02 on, ``scontrol -o`` text otherwise.

"Already done" answers are success, as the Protocol asks (checked on the local cluster):
requeue of a pending job ("Job is pending execution"), release of a finished job, drain of a
node that is already drained, resume of a node that is not drained. "Invalid job id" is
``JobGone``. A drain that is not ours is never resumed (Slinky ``IsNodeReasonOurs``).
"""

from __future__ import annotations

import asyncio
import getpass
import json
import logging
import re
from collections.abc import Sequence
from typing import Any

from trainguard.model import checks, workloads
from trainguard.schedulers import base, runner, slurm_cli, slurm_commands

logger = logging.getLogger(__name__)

_VERSION_RE = re.compile(r"(\d+)\.(\d+)")


class SlurmCommandScheduler:
    """``base.Scheduler`` over Slurm's own commands; one instance per cluster."""

    def __init__(self, run: runner.Runner, *, name: str = "slurm-local", cluster: str | None = None,
                 user: str | None = None) -> None:
        self.name = name
        self.user = user or getpass.getuser()
        """Who submits our validation checks, and so the one user our reservations admit."""
        self.runner = run
        self._cluster = cluster
        self._major: int | None = None

    # ------------------------------------------------------------ plumbing

    async def _call(self, argv: Sequence[str], *, ok_if: Sequence[str] = ()) -> runner.CommandResult:
        res = await self.runner.run(argv)
        if res.ok:
            return res
        msg = res.message
        if slurm_commands.is_gone(msg):
            raise base.JobGone(f"{self.name}: {msg}")
        if any(m in msg for m in ok_if):
            logger.info("%s: %s: already done (%s)", self.name, " ".join(argv), msg)
            return res
        raise base.SchedulerError(f"{self.name}: {' '.join(argv[:2])} failed (exit {res.returncode}): {msg}")

    async def slurm_major(self) -> int:
        """Slurm's major version (22, 24, ...), read once from ``scontrol --version``."""
        if self._major is None:
            res = await self._call(["scontrol", "--version"])
            m = _VERSION_RE.search(res.stdout)
            if m is None:
                raise base.SchedulerError(f"{self.name}: cannot read the Slurm version from {res.stdout!r}")
            self._major = int(m.group(1))
        return self._major

    async def cluster(self) -> str:
        if self._cluster is None:
            res = await self._call(["scontrol", "show", "config"])
            m = re.search(r"^ClusterName\s*=\s*(\S+)", res.stdout, re.MULTILINE)
            self._cluster = m.group(1) if m else "default"
        return self._cluster

    async def show_config(self) -> dict[str, str]:
        """slurmctld's running configuration (``scontrol show config``): what ``trainguard doctor``
        checks the loop's requirements against (JobRequeue, AccountingStoreFlags, ...)."""
        return slurm_commands.parse_show_config((await self._call(slurm_commands.argv_show_config())).stdout)

    def _json(self, res: runner.CommandResult) -> dict[str, Any]:
        try:
            data = json.loads(res.stdout)
        except json.JSONDecodeError as exc:
            raise base.SchedulerError(f"{self.name}: {res.argv[0]} printed no JSON: {exc}") from None
        if not isinstance(data, dict):
            raise base.SchedulerError(f"{self.name}: {res.argv[0]} printed JSON that is not an object")
        errors = [e for e in data.get("errors") or [] if isinstance(e, dict)]
        if errors:
            text = "; ".join(str(e.get("error") or e.get("description") or e) for e in errors)
            if slurm_commands.is_gone(text):
                raise base.JobGone(f"{self.name}: {text}")
            raise base.SchedulerError(f"{self.name}: {res.argv[0]}: {text}")
        return data

    # ------------------------------------------------------------ reads

    async def list_jobs(self) -> list[workloads.JobSnapshot]:
        """One ``squeue --json --states=all`` for all jobs (pending, running and finished within MinJobAge)."""
        data = self._json(await self._call(slurm_commands.argv_list_jobs()))
        jobs: list[workloads.JobSnapshot] = []
        for rec in data.get("jobs") or []:
            if not isinstance(rec, dict) or not slurm_cli.opted_in(str(rec.get("comment") or "")):
                continue
            if self._cluster is None and isinstance(rec.get("cluster"), str):
                self._cluster = rec["cluster"]
            snap = slurm_cli.job_from_json(rec, self._cluster or "")
            if snap is not None:
                jobs.append(snap)
        return jobs

    async def get_job(self, job_id: str) -> workloads.JobSnapshot:
        slurm_cli.validate_job_id(job_id)
        cluster = await self.cluster()
        if await self.slurm_major() >= 23:
            data = self._json(await self._call(["scontrol", "--json", "show", "job", job_id]))
            snaps = [s for r in data.get("jobs") or [] if (s := slurm_cli.job_from_json(r, cluster))]
        else:
            res = await self._call(slurm_commands.argv_show_job(job_id))
            snaps = [
                slurm_cli.job_from_scontrol(slurm_cli.parse_kv_line(line), cluster)
                for line in res.stdout.splitlines()
                if line.startswith("JobId=")
            ]
        for snap in snaps:
            if snap.job_id == job_id:
                return await self._with_hold_reason(snap)
        if len(snaps) == 1:
            return await self._with_hold_reason(snaps[0])
        if not snaps:
            raise base.JobGone(f"{self.name}: job {job_id} not found")
        raise base.SchedulerError(f"{self.name}: {job_id} names {len(snaps)} array tasks; use 123_4 ids")

    async def _with_hold_reason(self, snap: workloads.JobSnapshot) -> workloads.JobSnapshot:
        """Fill in the hold's reason code where ``scontrol -o`` printed only its description.

        After ``scontrol requeuehold`` the text shows ``Reason=job_requeued_in_held_state`` both
        for our hold and for a person's ``scontrol hold`` on top of it (only the code, which the
        text hides, turns into ``JobHeldAdmin``); ``squeue --json`` has both. Whether a hold is
        still ours depends on it, so a failed read is an error, not a guess.
        """
        if not snap.held or snap.hold_reason:
            return snap
        data = self._json(await self._call(slurm_commands.argv_squeue_job(snap.job_id)))
        for rec in data.get("jobs") or []:
            fresh = slurm_cli.job_from_json(rec) if isinstance(rec, dict) else None
            if fresh is not None and fresh.job_id == snap.job_id:
                return snap.model_copy(update={"held": fresh.held, "hold_reason": fresh.hold_reason,
                                               "hold_detail": fresh.hold_detail or snap.hold_detail})
        raise base.SchedulerError(f"{self.name}: squeue does not show held job {snap.job_id}")

    async def list_nodes(self) -> list[workloads.NodeSnapshot]:
        res = await self._call(slurm_commands.argv_show_nodes())
        return [
            slurm_cli.node_from_scontrol(slurm_cli.parse_kv_line(line))
            for line in res.stdout.splitlines()
            if line.startswith("NodeName=")
        ]

    async def _node(self, node: str) -> workloads.NodeSnapshot:
        slurm_cli.validate_node(node)
        for snap in await self.list_nodes():
            if snap.name == node:
                return snap
        raise base.SchedulerError(f"{self.name}: unknown node {node!r}")

    # ------------------------------------------------------------ job operations

    async def requeue(self, job_id: str) -> None:
        logger.info("%s: requeue %s", self.name, job_id)
        await self._call(slurm_commands.argv_job_op("requeue", job_id), ok_if=[slurm_commands.PENDING_MESSAGE])

    async def requeue_hold(self, job_id: str, *, attempt: int | None = None) -> None:
        logger.info("%s: requeuehold %s", self.name, job_id)
        res = await self._call(slurm_commands.argv_job_op("requeuehold", job_id),
                               ok_if=[slurm_commands.PENDING_MESSAGE])
        if not res.ok:  # already pending: holding it gives the same end state
            await self.hold(job_id)

    async def hold(self, job_id: str) -> None:
        logger.info("%s: hold %s", self.name, job_id)
        await self._call(slurm_commands.argv_job_op("hold", job_id))

    async def release(self, job_id: str) -> None:
        logger.info("%s: release %s", self.name, job_id)
        await self._call(slurm_commands.argv_job_op("release", job_id), ok_if=[slurm_commands.FINISHED_MESSAGE])

    async def cancel(self, job_id: str) -> None:
        logger.info("%s: cancel %s", self.name, job_id)
        await self._call(slurm_commands.argv_cancel(job_id), ok_if=[slurm_commands.FINISHED_MESSAGE])

    async def exclude_nodes(self, job_id: str, nodes: list[str]) -> None:
        for node in nodes:
            slurm_cli.validate_node(node)
        known = {n.name for n in await self.list_nodes()}
        unknown = sorted(set(nodes) - known)
        if unknown:
            raise base.SchedulerError(f"{self.name}: cannot exclude unknown node(s) {', '.join(unknown)}")
        job = await self.get_job(job_id)
        merged = list(job.excluded_nodes) + [n for n in dict.fromkeys(nodes) if n not in job.excluded_nodes]
        if merged == list(job.excluded_nodes):
            logger.info("%s: %s already excludes %s", self.name, job_id, ",".join(nodes))
            return
        if job.state not in slurm_commands.EXCLUDABLE_STATES:
            raise base.SchedulerError(
                f"{self.name}: excluded nodes can only change while a job is pending; {job_id} is {job.state}"
            )
        logger.info("%s: exclude %s from %s", self.name, ",".join(nodes), job_id)
        await self._call(slurm_commands.argv_exclude(job_id, merged))

    # ------------------------------------------------------------ node operations

    async def drain_node(self, node: str, reason: str) -> None:
        snap = await self._node(node)
        if snap.drained:
            ours = snap.reason.startswith(base.OUR_REASON_PREFIX)
            logger.info("%s: %s already drained (%s drain: %s)", self.name, node, "our" if ours else "foreign",
                        snap.reason)
            return
        logger.info("%s: drain %s", self.name, node)
        await self._call(slurm_commands.argv_node_state(node, "DRAIN", reason))

    async def resume_node(self, node: str) -> None:
        snap = await self._node(node)
        if not snap.drained:
            logger.info("%s: %s is not drained", self.name, node)
            return
        if not snap.reason.startswith(base.OUR_REASON_PREFIX):
            raise base.SchedulerError(
                f"{self.name}: refusing to resume {node}: its drain is not ours ({snap.reason!r})"
            )
        logger.info("%s: resume %s", self.name, node)
        await self._call(slurm_commands.argv_node_state(node, "RESUME"))

    # ------------------------------------------------------------ validation (act.ports.NodeValidator)

    async def create_reservation(self, node: str, minutes: int, user: str) -> str:
        """Our maintenance reservation of ``node`` (``slurm_commands.reservation_name``); its name."""
        name = slurm_commands.reservation_name(node)
        logger.info("%s: reserve %s for validation (%d min)", self.name, node, minutes)
        await self._call(slurm_commands.argv_create_reservation(name, node, minutes, user))
        return name

    async def delete_reservation(self, name: str) -> None:
        """Delete a reservation of ours; one that is already gone is success."""
        await self._call(slurm_commands.argv_delete_reservation(name), ok_if=("reservation is invalid",
                                                                             "Invalid reservation"))

    async def reserve_node(self, node: str, minutes: int) -> str:
        """Our reservation of ``node`` for the user we run as (who submits the check); one already there is
        ours by its name (a create cut short by a restart), and success."""
        name = slurm_commands.reservation_name(node)
        res = await self.runner.run(slurm_commands.argv_show_reservation(name))
        if res.ok and f"ReservationName={name} " in res.stdout + " ":
            logger.info("%s: our reservation %s is already there", self.name, name)
            return name
        return await self.create_reservation(node, minutes, self.user)

    async def unreserve_node(self, node: str) -> None:
        logger.info("%s: delete our reservation of %s", self.name, node)
        await self.delete_reservation(slurm_commands.reservation_name(node))

    async def submit_check(self, node: str, command: Sequence[str], *, tag: str, minutes: int, output_dir: str,
                           partition: str | None = None, image: str | None = None) -> str:
        """Submit the site's check pinned to ``node`` in our reservation, its output (and working directory)
        in ``output_dir``; the job id. ``image`` is Kubernetes' (the command runs on the node itself here)."""
        logger.info("%s: submit the check %s on %s", self.name, command[0] if command else "", node)
        res = await self._call(slurm_commands.argv_submit_check(
            command, reservation=slurm_commands.reservation_name(node), node=node, minutes=minutes,
            output=slurm_commands.check_output(output_dir, node), tag=tag, workdir=output_dir, partition=partition))
        return slurm_cli.validate_job_id(res.stdout.strip().split(";")[0])

    async def find_check(self, tag: str) -> str | None:
        """The newest job named after ``tag`` slurmctld still holds, in any state."""
        name = slurm_commands.check_job_name(tag)
        data = self._json(await self._call(slurm_commands.argv_list_jobs()))
        ids = [int(rec["job_id"]) for rec in data.get("jobs") or []
               if isinstance(rec, dict) and rec.get("name") == name and isinstance(rec.get("job_id"), int)]
        return str(max(ids)) if ids else None

    async def check_status(self, job_id: str) -> checks.CheckStatus:
        """The check job's phase, exit code and output tail (read here: ``outputDir`` is shared storage)."""
        try:
            job = await self.get_job(job_id)
        except base.JobGone:
            return checks.CheckStatus(checks.CheckPhase.GONE)
        if not job.state.finished:
            return checks.CheckStatus(checks.CheckPhase.WAITING, state=job.state.value)
        if job.state is workloads.JobState.COMPLETED and not job.exit_code:
            phase = checks.CheckPhase.PASSED
        elif job.state is workloads.JobState.FAILED and job.exit_code:
            phase = checks.CheckPhase.FAILED
        else:
            phase = checks.CheckPhase.NO_VERDICT
        tail = await asyncio.to_thread(_tail, job.stdout_path) if job.stdout_path else "no output file named"
        return checks.CheckStatus(phase, state=job.state.value, exit_code=job.exit_code, output_tail=tail)

    async def cancel_check(self, job_id: str) -> None:
        try:
            await self.cancel(job_id)
        except base.JobGone:
            logger.info("%s: check job %s is already gone", self.name, job_id)

    async def close(self) -> None:
        await self.runner.close()


TAIL_BYTES = 4096
"""How much of the end of a check's output is kept as evidence: the verdict lines, not the whole log."""


def _tail(path: str) -> str:
    """The last ``TAIL_BYTES`` of ``path``, or why it cannot be read here."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            return f.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"output not readable here ({path}): {exc.strerror or exc}"


def open_local(*, env: dict[str, str] | None = None, timeout: float = runner.DEFAULT_TIMEOUT,
               cluster: str | None = None) -> SlurmCommandScheduler:
    """``slurm-local``: Slurm commands on this host; ``env`` adds e.g. ``SLURM_CONF``."""
    return SlurmCommandScheduler(runner.LocalRunner(env=env, timeout=timeout), name="slurm-local", cluster=cluster)
