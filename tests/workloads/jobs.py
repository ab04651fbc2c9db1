"""sbatch scripts for the training workload, for the Slurm integration and end-to-end tests.

Place in the loop: test support, outside the product. ``training_job_script`` builds the text of a
batch script that runs ``train.py`` on N nodes of the local cluster, opted in to Trainguard through
``#SBATCH --comment`` exactly as a user would do it, with the options the product relies on
(``--requeue``, ``--open-mode=append`` so every attempt's lines stay in the output file,
``srun --label`` so every line names its rank, ``--kill-on-bad-exit`` so one dead rank ends the
step). The helpers below name the files a job leaves behind (output, job dir, checkpoint, pid
files) so tests do not repeat the layout.

By hand: ``python tests/workloads/jobs.py --nodes 2 --steps 200 --fault crash --workdir DIR | sbatch``.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

TRAIN_PY = Path(__file__).resolve().with_name("train.py")
FAULTS = ("crash", "hang", "slow", "xid", "exit93")  # the values train.py accepts in TG_FAULT
DO_NOT_REQUEUE_EXIT = 93

PROGRESS_RE = re.compile(r"^(?P<task>\d+): \[rank(?P<rank>\d+)\]: step (?P<step>\d+)/(?P<steps>\d+) \|", re.MULTILINE)
"""Rank 0's aggregate progress line, as it appears in the job output (with the srun label)."""
LOCAL_RE = re.compile(
    r"^(?P<task>\d+): \[rank(?P<rank>\d+)\]: local step (?P<step>\d+) \| (?P<rate>[\d.]+) samples/s"
    r" \| compute (?P<compute>[\d.]+) ms/iter",
    re.MULTILINE,
)
"""Each rank's own throughput line."""
CHECKPOINT_RE = re.compile(r"saved checkpoint step=(?P<step>\d+) to (?P<path>\S+)")
RESUMED_RE = re.compile(r"resumed from checkpoint step=(?P<step>\d+)")


def _quoted_sbatch_value(name: str, value: str) -> str:
    """A value for an ``#SBATCH`` line: sbatch splits those lines itself, so refuse what it cannot hold."""
    if any(ch in value for ch in '"\n\r\\'):
        raise ValueError(f"{name} must not contain quotes, backslashes or newlines: {value!r}")
    return f'"{value}"'


def _sbatch_option(option: str) -> str:
    """One extra ``#SBATCH`` option: a long option with an optional plain value, nothing sbatch could split."""
    if not re.fullmatch(r"--[a-z][a-z-]*(=[A-Za-z0-9_.,:\[\]-]+)?", option):
        raise ValueError(f"not a plain sbatch long option: {option!r}")
    return option


def training_job_script(
    *,
    nodes: int,
    steps: int,
    fault: str | None = None,
    fault_rank: int | str | None = None,
    fault_step: int | None = None,
    comment: str = "trainguard",
    workdir: str | Path,
    step_time: float | None = None,
    ckpt_every: int | None = None,
    log_every: int | None = None,
    fault_all_attempts: bool = False,
    job_name: str = "tg-train",
    python: str | Path = sys.executable,
    extra_env: Mapping[str, str] | None = None,
    sbatch_options: Sequence[str] = (),
    open_mode: str = "append",
) -> str:
    """Text of an sbatch script running ``train.py`` with one task on each of ``nodes`` nodes.

    ``workdir`` must exist and be visible to the nodes: the output goes to
    ``<workdir>/slurm-<jobid>.out`` and checkpoints and pid files to ``<workdir>/job-<jobid>/``.
    ``fault`` is one of ``FAULTS`` (applied on the first attempt only unless ``fault_all_attempts``);
    ``fault_rank`` may be an int, a comma list or ``"all"``. ``None`` settings keep train.py's
    defaults. Every ``TG_*`` variable is set explicitly, so nothing leaks in from the submitter's
    environment (sbatch exports it by default). ``sbatch_options`` are added as ``#SBATCH`` lines
    after the defaults (e.g. ``--exclude=node4`` or ``--nodelist=node1,node2``), so they win.
    ``open_mode`` is sbatch's ``--open-mode``:
    ``append`` keeps every attempt's lines in the output file, ``truncate`` (Slurm's default)
    empties it when the next attempt starts.
    """
    if open_mode not in ("append", "truncate"):
        raise ValueError(f"open_mode must be append or truncate (got {open_mode!r})")
    if nodes < 1 or steps < 1:
        raise ValueError(f"nodes and steps must be at least 1 (got nodes={nodes}, steps={steps})")
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"fault must be one of {', '.join(FAULTS)} (got {fault!r})")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", job_name):
        raise ValueError(f"job_name must be letters, digits, '_', '.', '-' (got {job_name!r})")
    work = Path(workdir).resolve()
    env: dict[str, str] = {
        "TG_WORKDIR": str(work),
        "TG_STEPS": str(steps),
        "TG_FAULT": fault or "",
        "TG_FAULT_RANK": "" if fault_rank is None else str(fault_rank),
        "TG_FAULT_STEP": "" if fault_step is None else str(fault_step),
        "TG_FAULT_ALL_ATTEMPTS": "1" if fault_all_attempts else "",
        "TG_STEP_TIME": "" if step_time is None else str(step_time),
        "TG_CKPT_EVERY": "" if ckpt_every is None else str(ckpt_every),
        "TG_LOG_EVERY": "" if log_every is None else str(log_every),
        "TG_JOB_DIR": "",
        "TG_MASTER_PORT": "",
    }
    for key, value in (extra_env or {}).items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"not an environment variable name: {key!r}")
        env[key] = value
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --comment={_quoted_sbatch_value('comment', comment)}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --requeue",
        f"#SBATCH --open-mode={open_mode}",
        f"#SBATCH --output={_quoted_sbatch_value('workdir', str(work / 'slurm-%j.out'))}",
        *(f"#SBATCH {_sbatch_option(option)}" for option in sbatch_options),
        "",
        *(f"export {key}={shlex.quote(value)}" for key, value in env.items()),
        "",
        "# A JWT in the environment (exported by sbatch from the submitter's shell) would make srun",
        "# authenticate with auth/jwt, which slurmd does not accept: steps must use the cluster's own auth.",
        "unset SLURM_JWT",
        "# The ranks meet through a port file named by this id (train.py: rendezvous): one per run of",
        "# this script, so no attempt of any job, on this cluster or another one, reads another's file.",
        'export TG_RENDEZVOUS_ID="$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}.$(date +%s%N).$$"',
        'echo "batch attempt ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID on $SLURM_JOB_NODELIST"',
        shlex.join(["exec", "srun", "--label", "--kill-on-bad-exit=1", str(python), "-u", str(TRAIN_PY)]),
        "",
    ]
    return "\n".join(lines)


def output_path(workdir: str | Path, job_id: str | int) -> Path:
    """The job's output file (all attempts, appended)."""
    return Path(workdir).resolve() / f"slurm-{job_id}.out"


def job_dir(workdir: str | Path, job_id: str | int) -> Path:
    """Checkpoints and pid files of one job (the same directory for every attempt)."""
    return Path(workdir).resolve() / f"job-{job_id}"


def checkpoint_path(workdir: str | Path, job_id: str | int) -> Path:
    return job_dir(workdir, job_id) / "checkpoint.pt"


def pid_path(workdir: str | Path, job_id: str | int, rank: int) -> Path:
    """Where rank ``rank`` of the current attempt wrote its pid (for a test's ``kill -9``)."""
    return job_dir(workdir, job_id) / f"rank{rank}.pid"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print an sbatch script for the training workload.")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--fault", choices=FAULTS)
    parser.add_argument("--fault-rank")
    parser.add_argument("--fault-step", type=int)
    parser.add_argument("--comment", default="trainguard")
    parser.add_argument("--workdir", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        text = training_job_script(
            nodes=args.nodes,
            steps=args.steps,
            fault=args.fault,
            fault_rank=args.fault_rank,
            fault_step=args.fault_step,
            comment=args.comment,
            workdir=args.workdir,
        )
    except ValueError as exc:
        print(f"jobs.py: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
