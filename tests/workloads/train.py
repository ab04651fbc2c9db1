"""A real data-parallel PyTorch training job, the workload Trainguard's Slurm tests watch.

Place in the loop: this is the *thing being watched*, not part of Trainguard. The integration
and end-to-end tests submit it to the local multi-node Slurm cluster (``tests/workloads/jobs.py``
builds the sbatch script) so that the signals Trainguard reads -- job output files with
``srun --label`` prefixes, progress lines, checkpoints, exit codes, requeues -- come from a real
multi-process job and not from hand-written text.

One process per Slurm task (``srun``): rank = ``SLURM_PROCID``, world = ``SLURM_NTASKS``. All the
local "nodes" are this host, so the rendezvous is on ``127.0.0.1``: rank 0 opens the rendezvous
store on a port the kernel picks (port 0) and publishes it in a file of the job directory that the
other ranks wait for (see ``rendezvous``). The collective backend is
``gloo`` on CPU; a tiny MLP learns a fixed random teacher from synthetic data with
DistributedDataParallel. Each step adds a configurable sleep that stands in for accelerator time,
so a job lasts tens of seconds while using little of the shared CPU.

Rank 0 saves a checkpoint every K steps (atomic: temporary file, fsync, rename) and every attempt
resumes from the latest one, as real trainers do after a requeue.

Failures are injected by environment (first attempt only unless ``TG_FAULT_ALL_ATTEMPTS=1``):
``crash``, ``hang``, ``slow``, ``xid``, ``exit93``; see ``README.md`` beside this file. Each rank
writes its pid to ``<job dir>/rank<R>.pid`` so that a test can ``kill -9`` it.

Run standalone (one process, world 1) for a quick look: ``python train.py --steps 20``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import io
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

FAULTS = ("crash", "hang", "slow", "xid", "exit93")
DO_NOT_REQUEUE_EXIT = 93
"""Exit code a job uses to say "retrying will not help" (a common site convention)."""

RENDEZVOUS_HOST = "127.0.0.1"
"""Every local "node" is this host."""
RENDEZVOUS_POLL = 0.05
"""Seconds between two looks of a waiting rank for rank 0's port file."""

CHECKPOINT_NAME = "checkpoint.pt"
FEATURES = 32
HIDDEN = 64


class UsageError(Exception):
    """Bad settings: reported as one clear line and exit code 2, never a traceback."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything one rank needs, resolved from arguments, environment and Slurm variables."""

    steps: int
    step_time: float
    batch_size: int
    ckpt_every: int
    log_every: int
    pg_timeout: float
    job_dir: Path
    fault: str | None
    fault_ranks: frozenset[int] | None  # None = every rank
    fault_step: int
    fault_all_attempts: bool
    slow_seconds: float
    xid: int
    seed: int
    fault_node: str = ""
    """The host name the ``xid`` fault's driver line names ("" = this rank's node). Another name
    forges a line about a node the job never ran on, as a user's output can."""


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where this process runs in the job: Slurm's view, or a single local process."""

    rank: int
    world: int
    node: str
    job_id: str
    attempt: int


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r} is not an integer") from None


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r} is not a number") from None


def read_placement(env: Mapping[str, str]) -> Placement:
    """Rank, world, node and attempt from Slurm's task environment (or a lone local process)."""
    rank = _env_int(env, "SLURM_PROCID", _env_int(env, "RANK", 0))
    world = _env_int(env, "SLURM_NTASKS", _env_int(env, "WORLD_SIZE", 1))
    if world < 1 or not 0 <= rank < world:
        raise UsageError(f"rank {rank} is outside a world of {world}")
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    job_id = env.get("SLURM_JOB_ID") or f"local-{os.getpid()}"
    attempt = _env_int(env, "SLURM_RESTART_COUNT", 0)
    return Placement(rank=rank, world=world, node=node, job_id=job_id, attempt=attempt)


def parse_fault_ranks(raw: str, fault: str | None, world: int) -> frozenset[int] | None:
    """``TG_FAULT_RANK``: an integer, a comma list, or ``all``.

    Unset means rank 1 (the first non-zero rank, so rank 0's aggregate lines show the cascade),
    except for ``exit93``, which by default every rank does: the application decided to stop.
    """
    raw = raw.strip()
    if raw == "all" or (not raw and fault == "exit93"):
        return None
    if not raw:
        return frozenset({min(1, world - 1)})
    try:
        ranks = frozenset(int(part) for part in raw.split(","))
    except ValueError:
        raise UsageError(f"TG_FAULT_RANK={raw!r} is not a rank, a comma list of ranks, or 'all'") from None
    if any(r < 0 for r in ranks):
        raise UsageError(f"TG_FAULT_RANK={raw!r} has a negative rank")
    return ranks


def read_settings(argv: Sequence[str], env: Mapping[str, str], placement: Placement) -> Settings:
    """Arguments win over ``TG_*`` environment variables, which win over the defaults."""
    parser = argparse.ArgumentParser(description="Tiny data-parallel training job (gloo, CPU).")
    parser.add_argument("--steps", type=int, default=_env_int(env, "TG_STEPS", 200))
    parser.add_argument(
        "--step-time",
        type=float,
        default=_env_float(env, "TG_STEP_TIME", 0.1),
        help="seconds of simulated accelerator time per step (a sleep; keeps the shared CPU free)",
    )
    parser.add_argument("--batch-size", type=int, default=_env_int(env, "TG_BATCH_SIZE", 32))
    parser.add_argument("--ckpt-every", type=int, default=_env_int(env, "TG_CKPT_EVERY", 40))
    parser.add_argument("--log-every", type=int, default=_env_int(env, "TG_LOG_EVERY", 10))
    parser.add_argument(
        "--pg-timeout",
        type=float,
        default=_env_float(env, "TG_PG_TIMEOUT", 600.0),
        help="seconds a collective may block before gloo gives up (long, so a hang stays a hang)",
    )
    parser.add_argument("--job-dir", type=Path, default=None, help="checkpoints and pid files")
    args = parser.parse_args(list(argv))

    for name in ("steps", "batch_size", "ckpt_every", "log_every"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if args.step_time < 0 or args.pg_timeout <= 0:
        raise UsageError("--step-time must be >= 0 and --pg-timeout > 0")

    job_dir: Path = args.job_dir or (
        Path(env["TG_JOB_DIR"])
        if env.get("TG_JOB_DIR")
        else Path(env.get("TG_WORKDIR") or ".") / f"job-{placement.job_id}"
    )
    fault = env.get("TG_FAULT", "").strip() or None
    if fault is not None and fault not in FAULTS:
        raise UsageError(f"TG_FAULT={fault!r} is not one of {', '.join(FAULTS)}")
    return Settings(
        steps=args.steps,
        step_time=args.step_time,
        batch_size=args.batch_size,
        ckpt_every=args.ckpt_every,
        log_every=args.log_every,
        pg_timeout=args.pg_timeout,
        job_dir=job_dir,
        fault=fault,
        fault_ranks=parse_fault_ranks(env.get("TG_FAULT_RANK", ""), fault, placement.world),
        fault_step=_env_int(env, "TG_FAULT_STEP", 10),
        fault_all_attempts=env.get("TG_FAULT_ALL_ATTEMPTS", "") == "1",
        slow_seconds=_env_float(env, "TG_FAULT_SLOW_SECONDS", 0.3),
        xid=_env_int(env, "TG_FAULT_XID", 79),
        seed=_env_int(env, "TG_SEED", 1234),
        fault_node=env.get("TG_FAULT_NODE", "").strip(),
    )


def rendezvous_path(job_dir: Path, env: Mapping[str, str], placement: Placement) -> Path:
    """The file in which rank 0 of this launch publishes its rendezvous port.

    Named by ``TG_RENDEZVOUS_ID`` (the batch script of ``jobs.py`` sets one that is unique to each
    run of the script, i.e. to each attempt), else by job id, attempt and step, so that a file a
    previous attempt (or an earlier cluster reusing the directory) left behind is never read.
    """
    launch = env.get("TG_RENDEZVOUS_ID") or (
        f"{placement.job_id}.{placement.attempt}.{env.get('SLURM_STEP_ID', '0')}"
    )
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in launch)
    return job_dir / f"rendezvous-{safe}.port"


def wait_for_port(path: Path, timeout: float) -> int:
    """Wait until rank 0 has published its port in ``path`` (written atomically); return it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return int(path.read_text().strip())
        except FileNotFoundError:
            pass
        except ValueError:
            raise UsageError(f"{path} does not hold a port number") from None
        if time.monotonic() >= deadline:
            raise UsageError(f"rank 0 did not publish its rendezvous port in {path} within {timeout:.0f} s")
        time.sleep(RENDEZVOUS_POLL)


def rendezvous(env: Mapping[str, str], settings: Settings, placement: Placement) -> dist.Store:
    """The store the ranks meet through, collision-free by construction.

    A port derived from the job id is not: job ids restart at 1 on every fresh cluster, several
    clusters share a host, a requeued attempt's old processes may still hold the port, and any
    port may be in TIME_WAIT or taken by an unrelated process (gloo's own connections use the
    same ephemeral range). So rank 0 binds port 0 -- the kernel hands out a free one -- and writes
    it to ``rendezvous_path``; every other rank waits for that file, then connects. Each attempt
    has its own file, so a requeued attempt never meets the previous one. ``TG_MASTER_PORT``
    (by hand, without Slurm) fixes the port instead.
    """
    timeout = datetime.timedelta(seconds=settings.pg_timeout)
    is_master = placement.rank == 0
    if env.get("TG_MASTER_PORT"):
        port = _env_int(env, "TG_MASTER_PORT", 0)
        return dist.TCPStore(RENDEZVOUS_HOST, port, placement.world, is_master, timeout=timeout,
                             wait_for_workers=False)
    path = rendezvous_path(settings.job_dir, env, placement)
    if is_master:
        store = dist.TCPStore(RENDEZVOUS_HOST, 0, placement.world, True, timeout=timeout, wait_for_workers=False)
        write_atomically(path, f"{store.port}\n".encode())
        return store
    port = wait_for_port(path, settings.pg_timeout)
    return dist.TCPStore(RENDEZVOUS_HOST, port, placement.world, False, timeout=timeout)


def write_atomically(path: Path, data: bytes) -> None:
    """Temporary file in the same directory, fsync, rename: readers never see half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class Trainer:
    """One rank's training loop: resume, train, log, checkpoint, and inject the requested fault."""

    def __init__(self, settings: Settings, placement: Placement) -> None:
        self.s = settings
        self.p = placement
        self.fault_active = settings.fault is not None and (settings.fault_all_attempts or placement.attempt == 0)
        if settings.fault == "exit93" and self.faulty_rank():
            # srun --kill-on-bad-exit sends SIGTERM to the other ranks as soon as the first one exits
            # 93; a rank still on its way to its own exit 93 would die of it, and the job would end
            # with 143:0, not 93:0. A rank that is going to exit 93 ignores SIGTERM for this attempt
            # (SIGKILL, which scancel sends after KillWait, still ends it). Set before the first
            # collective, so no rank can exit before every faulty rank has armed.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.checkpoint = settings.job_dir / CHECKPOINT_NAME
        torch.manual_seed(settings.seed)  # same initial weights and teacher on every rank
        self.teacher = torch.randn(FEATURES, 1) / FEATURES**0.5
        self.model = DistributedDataParallel(
            nn.Sequential(
                nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1)
            )
        )
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=3e-3)
        self.loss_fn = nn.MSELoss()

    def say(self, message: str) -> None:
        print(f"[rank{self.p.rank}]: {message}")

    def faulty_rank(self) -> bool:
        """Whether this rank injects the fault on this attempt (at some step)."""
        return self.fault_active and (self.s.fault_ranks is None or self.p.rank in self.s.fault_ranks)

    def faulty(self, step: int) -> bool:
        """Whether this rank injects its fault at ``step`` (``slow`` persists from that step on)."""
        if not self.faulty_rank():
            return False
        return step >= self.s.fault_step if self.s.fault == "slow" else step == self.s.fault_step

    def resume(self) -> int:
        """Load the latest checkpoint if there is one; returns the step it holds (0 if none)."""
        if not self.checkpoint.exists():
            if self.p.rank == 0 and self.p.attempt > 0:
                self.say(f"no checkpoint at {self.checkpoint}, starting from step 0 (attempt {self.p.attempt})")
            return 0
        try:
            state: dict[str, Any] = torch.load(self.checkpoint, map_location="cpu", weights_only=True)
            self.model.module.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            step = int(state["step"])
        except Exception as exc:  # any unreadable checkpoint: say so, keep the file, do not start over
            raise UsageError(f"cannot read checkpoint {self.checkpoint}: {exc}") from None
        if self.p.rank == 0:
            self.say(f"resumed from checkpoint step={step} (attempt {self.p.attempt})")
        return step

    def save(self, step: int) -> None:
        """Rank 0 only: write the checkpoint atomically (the other ranks hold identical weights)."""
        buffer = io.BytesIO()
        state = {"step": step, "model": self.model.module.state_dict(), "optimizer": self.optimizer.state_dict()}
        torch.save(state, buffer)
        write_atomically(self.checkpoint, buffer.getvalue())
        self.say(f"saved checkpoint step={step} to {self.checkpoint}")

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's shard of synthetic data for ``step`` (reproducible across attempts)."""
        generator = torch.Generator().manual_seed(self.s.seed * 1_000_003 + step * 1009 + self.p.rank)
        x = torch.randn(self.s.batch_size, FEATURES, generator=generator)
        y = torch.tanh(3 * x @ self.teacher) + 0.01 * torch.randn(self.s.batch_size, 1, generator=generator)
        return x, y

    def inject(self, step: int) -> float:
        """Carry out this rank's fault at ``step``; returns extra seconds to add (``slow``)."""
        if not self.faulty(step):
            return 0.0
        fault, p = self.s.fault, self.p
        if fault == "crash":
            raise RuntimeError(f"injected failure on rank {p.rank} (node {p.node}) at step {step}")
        if fault == "hang":
            self.say(f"step {step}: entering a blocking call")  # the last line this rank prints
            while True:  # never reaches the next collective: the other ranks block in all_reduce
                time.sleep(3600)
        if fault == "xid":
            self.report_gpu_failure(step)
        if fault == "exit93":
            self.say(
                f"unrecoverable input error at step {step}: exiting with code {DO_NOT_REQUEUE_EXIT} (do not requeue)"
            )
            sys.stdout.flush()
            os._exit(DO_NOT_REQUEUE_EXIT)
        return self.s.slow_seconds

    def report_gpu_failure(self, step: int) -> NoReturn:
        """Print the driver's Xid line (syslog form, with this node's name), then fail like CUDA does."""
        stamp = time.strftime("%b %d %H:%M:%S")
        pid = os.getpid()
        if self.s.xid == 48:
            kernel = (
                f"NVRM: Xid (PCI:0000:3b:00): 48, pid={pid}, name=python, An uncorrectable double bit error "
                "(DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0."
            )
            cuda = "CUDA error: uncorrectable ECC error encountered"
        else:
            kernel = f"NVRM: Xid (PCI:0000:3b:00): {self.s.xid}, pid={pid}, name=python, GPU has fallen off the bus."
            cuda = "CUDA error: unspecified launch failure"
        print(f"{stamp} {self.s.fault_node or self.p.node} kernel: {kernel}", file=sys.stderr)
        raise RuntimeError(
            f"{cuda}\nCUDA kernel errors might be asynchronously reported at some other API call, "
            "so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1."
            f"\n(step {step}, rank {self.p.rank}, node {self.p.node})"
        )

    def run(self) -> None:
        start = self.resume()
        if start >= self.s.steps:
            if self.p.rank == 0:
                self.say(f"nothing to do: checkpoint step={start} >= {self.s.steps} steps")
            return
        began = window_start = time.monotonic()
        compute = comm = 0.0
        window_steps = 0
        for step in range(start + 1, self.s.steps + 1):
            t0 = time.monotonic()
            extra = self.inject(step)
            x, y = self.batch(step)
            self.optimizer.zero_grad(set_to_none=True)
            loss = self.loss_fn(self.model(x), y)
            time.sleep(self.s.step_time + extra)  # stands in for the accelerator's share of the step
            t1 = time.monotonic()
            loss.backward()  # DDP all_reduces the gradients here: every rank waits for the slowest
            self.optimizer.step()
            t2 = time.monotonic()
            compute += t1 - t0
            comm += t2 - t1
            window_steps += 1
            if step % self.s.log_every == 0 or step == self.s.steps:
                self.log_progress(step, loss, window_start, window_steps, compute, comm)
                window_start, window_steps, compute, comm = time.monotonic(), 0, 0.0, 0.0
            if self.p.rank == 0 and (step % self.s.ckpt_every == 0 or step == self.s.steps):
                self.save(step)
        if self.p.rank == 0:
            self.say(f"training complete: {self.s.steps} steps, this attempt {time.monotonic() - began:.1f} s")

    def log_progress(
        self, step: int, loss: torch.Tensor, since: float, steps: int, compute: float, comm: float
    ) -> None:
        """Rank 0: the aggregate line real trainers print. Every rank: its own throughput."""
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        elapsed = max(time.monotonic() - since, 1e-9)
        local_rate = steps * self.s.batch_size / max(compute, 1e-9)
        if self.p.rank == 0:
            rate = steps * self.s.batch_size * self.p.world / elapsed
            self.say(
                f"step {step}/{self.s.steps} | loss {mean.item() / self.p.world:.4f} | {rate:.1f} samples/s"
                f" | elapsed/iter {1000 * elapsed / steps:.1f} ms"
            )
        self.say(
            f"local step {step} | {local_rate:.1f} samples/s | compute {1000 * compute / steps:.1f} ms/iter"
            f" | allreduce+backward {1000 * comm / steps:.1f} ms/iter"
        )


def main(argv: Sequence[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    env = os.environ
    try:
        placement = read_placement(env)
        settings = read_settings(sys.argv[1:] if argv is None else argv, env, placement)
        settings.job_dir.mkdir(parents=True, exist_ok=True)
    except (UsageError, OSError) as exc:
        print(f"train.py: error: {exc}", file=sys.stderr)
        return 2
    write_atomically(settings.job_dir / f"rank{placement.rank}.pid", f"{os.getpid()}\n".encode())
    print(
        f"[rank{placement.rank}]: rank {placement.rank} on node {placement.node} pid {os.getpid()}"
        f" attempt {placement.attempt} (world {placement.world}, job {placement.job_id})"
    )
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # every local "node" is this host
    try:
        store = rendezvous(env, settings, placement)
    except UsageError as exc:
        print(f"[rank{placement.rank}]: error: {exc}", file=sys.stderr)
        return 2
    dist.init_process_group(
        "gloo",
        store=store,
        rank=placement.rank,
        world_size=placement.world,
        timeout=datetime.timedelta(seconds=settings.pg_timeout),
    )
    try:
        Trainer(settings, placement).run()
    except UsageError as exc:
        print(f"[rank{placement.rank}]: error: {exc}", file=sys.stderr)
        return 2
    # Leave together, and without C++ destructors: rank 0 hosts the TCPStore, and a rank whose
    # interpreter is still shutting down when that store goes away can die in a destructor with
    # "terminate called without an active exception" (seen under load), which srun reports as a
    # failed step of a run that completed.
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
