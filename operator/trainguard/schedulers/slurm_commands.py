"""The Slurm commands Trainguard runs (argv lists only) and how to read their refusals.

Pure functions, no I/O, beside ``slurm_cli`` (what Slurm prints, parsed): ``slurm_local`` runs these
argv lists on this host (``slurm_ssh`` over SSH), never through a shell, and every job id and node
name is validated before it reaches one (``slurm_cli.validate_job_id`` / ``validate_node``);
``slurm_rest`` reads the same refusal messages from slurmrestd's errors.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from trainguard.model import workloads
from trainguard.schedulers import base
from trainguard.schedulers.slurm_cli import validate_job_id, validate_node


def argv_list_jobs() -> list[str]:
    """Every job slurmctld still holds, finished ones included: discovery learns how a run ended
    from them. ``squeue --json`` lists all states on 22.05 but only pending and running jobs on
    24.11, like plain ``squeue``; ``--states=all`` gives the same listing on both."""
    return ["squeue", "--json", "--states=all"]


def argv_squeue_job(job_id: str) -> list[str]:
    return ["squeue", "--json", "--jobs", validate_job_id(job_id)]


def argv_show_job(job_id: str) -> list[str]:
    return ["scontrol", "-o", "show", "job", validate_job_id(job_id)]


def argv_show_nodes() -> list[str]:
    return ["scontrol", "-o", "show", "node"]


def argv_show_config() -> list[str]:
    return ["scontrol", "show", "config"]


def parse_show_config(text: str) -> dict[str, str]:
    """``scontrol show config`` (``Key  = value`` lines) -> ``Key -> value``; other lines skipped."""
    config: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key and " " not in key:
            config.setdefault(key, value.strip())
    return config


def argv_job_op(op: str, job_id: str) -> list[str]:
    if op not in ("requeue", "requeuehold", "hold", "release"):
        raise ValueError(f"unknown job operation {op!r}")
    return ["scontrol", op, validate_job_id(job_id)]


def argv_cancel(job_id: str) -> list[str]:
    return ["scancel", validate_job_id(job_id)]


def argv_exclude(job_id: str, nodes: Sequence[str]) -> list[str]:
    names = [validate_node(n) for n in nodes]
    return ["scontrol", "update", f"JobId={validate_job_id(job_id)}", f"ExcNodeList={','.join(names)}"]


def argv_node_state(node: str, state: str, reason: str | None = None) -> list[str]:
    if state not in ("DRAIN", "RESUME"):
        raise ValueError(f"unknown node state {state!r}")
    argv = ["scontrol", "update", f"NodeName={validate_node(node)}", f"State={state}"]
    if reason is not None:
        argv.append(f"Reason={our_reason(reason)}")
    return argv


RESERVATION_RE = re.compile(r"^trainguard-validate-[A-Za-z0-9._-]{1,200}$")
"""Our reservations' names: the tag says whose it is (a reservation not named so is never deleted by us)."""


def reservation_name(node: str) -> str:
    """The name of our validation reservation on ``node``."""
    return f"trainguard-validate-{validate_node(node)}"


def validate_reservation(name: str) -> str:
    if not RESERVATION_RE.match(name):
        raise base.SchedulerError(f"not a reservation of ours: {name!r}")
    return name


def argv_create_reservation(name: str, node: str, minutes: int, user: str) -> list[str]:
    """A maintenance reservation of ``node`` for ``user`` starting now: no user job lands on the node while
    it exists (checked on the local cluster: a job asking for the node waits, "reserved for other job")."""
    if minutes < 1 or not re.match(r"^[A-Za-z0-9._-]{1,64}$", user):
        raise ValueError(f"bad reservation request: {minutes} min for {user!r}")
    return ["scontrol", "create", "reservation", f"ReservationName={validate_reservation(name)}",
            f"Nodes={validate_node(node)}", "StartTime=now", f"Duration={minutes}", f"Users={user}",
            "Flags=maint,ignore_jobs"]


def argv_delete_reservation(name: str) -> list[str]:
    return ["scontrol", "delete", f"ReservationName={validate_reservation(name)}"]


CHECK_JOB_PREFIX = "trainguard-validate-"
"""Name prefix of our check jobs; the rest is the round's tag (``check_job_name``)."""


def check_job_name(tag: str) -> str:
    if not re.match(r"^[A-Za-z0-9]{1,64}$", tag):
        raise ValueError(f"bad check tag {tag!r}")
    return CHECK_JOB_PREFIX + tag


def check_output(output_dir: str, node: str) -> str:
    """The check's output file in ``output_dir`` (``%j``: Slurm puts in the job id)."""
    if not re.match(r"^/[A-Za-z0-9._/+@=-]{0,1023}$", output_dir):
        raise ValueError(f"bad output directory {output_dir!r}")
    return f"{output_dir.rstrip('/')}/trainguard-validate-{validate_node(node)}-%j.out"


def argv_submit_check(command: Sequence[str], *, reservation: str, node: str, minutes: int, output: str,
                      tag: str, workdir: str | None = None, partition: str | None = None) -> list[str]:
    """``sbatch`` of the site's check, pinned to ``node`` inside our reservation. ``command`` is the check's
    argv: its first word a script (``#!`` first line, as sbatch requires) run with the rest as arguments;
    no shell of ours is involved and no word is interpolated into one."""
    if not command or minutes < 1:
        raise ValueError("a check needs a command and a time limit")
    if any("\n" in word or "\x00" in word for word in [*command, output, workdir or ""]):
        raise ValueError("a word of the check contains a newline or NUL")
    argv = ["sbatch", "--parsable", f"--reservation={validate_reservation(reservation)}",
            f"--nodelist={validate_node(node)}", "--nodes=1", f"--time={minutes}", f"--output={output}",
            f"--job-name={check_job_name(tag)}"]
    if workdir:
        argv.append(f"--chdir={workdir}")
    if partition:
        argv.append(f"--partition={validate_node(partition)}")
    return [*argv, *command]


def argv_show_reservation(name: str) -> list[str]:
    return ["scontrol", "-o", "show", "reservation", validate_reservation(name)]


def our_reason(reason: str) -> str:
    """Prefix a reason with our tag (once) and keep it on one printable line."""
    text = " ".join(reason.split())
    if not text.startswith(base.OUR_REASON_PREFIX):
        text = f"{base.OUR_REASON_PREFIX} {text}".rstrip()
    return text[:256]


# ---------------------------------------------------------------- what their refusals say

GONE_MESSAGES = ("Invalid job id specified", "Invalid job id")
EXCLUDABLE_STATES = frozenset({workloads.JobState.PENDING, workloads.JobState.COMPLETING})
"""States in which Slurm accepts ``ExcNodeList``: pending, and the COMPLETING that follows a
``requeuehold`` while the old processes die (checked on 22.05: the exclusion is kept). Waiting
for PENDING instead lets the watchdog release the hold first, and the job runs on the bad node."""
PENDING_MESSAGE = "Job is pending execution"
NOT_PENDING_MESSAGE = "Job is no longer pending execution"
FINISHED_MESSAGE = "Job has already finished"


def is_gone(message: str) -> bool:
    return any(m in message for m in GONE_MESSAGES)
