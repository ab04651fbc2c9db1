"""Seeded generator of large cascade logs: one rank dies, thousands of peers time out around it.

Test support, outside the product. ``cascade_log`` writes the output of a ``world``-rank job (8 ranks
per node) in which one rank fails first (``xid``: the node's kernel reports Xid 79 and the rank a
CUDA error; ``segfault``; ``killed``: srun reports the task killed) and every other rank prints what
its peers print in a real cascade: an NCCL watchdog timeout, a connection closed/reset or
``remote process exited`` and the head of a traceback. The hard parts of real output are in it:

* interleaving: the peers' lines are shuffled, and some pairs of ranks' lines share one line;
* truncation: some lines are cut short (a writer killed mid-line, a capped log line);
* late arrival: the failing rank's own lines come after ``late_share`` of the cascade (its output
  was buffered, or its node's log was shipped later).

Same ``seed``, same log. The expected verdict is in ``Cascade``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

TASKS_PER_NODE = 8
KINDS = ("xid", "segfault", "killed")


@dataclass(frozen=True)
class Cascade:
    """A generated log and what a correct first-cause reading says about it."""

    lines: list[str]
    cause_at: int
    """Index in ``lines`` of the failing rank's first line (after the late-arrival shift)."""
    kind: str
    rank: int
    node: str
    category: str


def node_name(rank: int) -> str:
    return f"gpu-{rank // TASKS_PER_NODE:04d}"


def nodes(world: int) -> list[str]:
    return [node_name(rank) for rank in range(0, world, TASKS_PER_NODE)]


def cascade_log(
    seed: int, *, world: int = 4096, kind: str = "xid", late_share: float = 0.7, truncate_share: float = 0.05
) -> Cascade:
    """The output of one failed attempt of a ``world``-rank job (deterministic in ``seed``)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    rnd = random.Random(seed)
    dead = rnd.randrange(1, world)
    node = node_name(dead)
    head = [
        f"[rank{r}]:{node_name(r)}:{4000 + r}:{4000 + r} [{r % TASKS_PER_NODE}] NCCL INFO comm 0x{seed:x}{r:04x} "
        f"rank {r} nranks {world} cudaDev {r % TASKS_PER_NODE} busId 18000 - Init COMPLETE"
        for r in range(world)
    ]
    head += [f"[rank0]:step {step}/1000 | loss 2.1 | 1234.5 samples/s" for step in range(1, 6)]
    seq = 1234
    cascade: list[str] = []
    for r in range(world):
        if r == dead:
            continue
        cascade.append(
            f"[rank{r}]:[E1129 12:10:0{r % 10}.123456 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1048576, "
            f"NumelOut=1048576, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
        )
        peer_gone = rnd.choice(
            (
                f"[rank{r}]:RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
                f"peer [10.0.{dead // 256}.{dead % 256}]:23456",
                f"[rank{r}]:torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote "
                "process exited or there was a network error, NCCL version 2.20.5",
                f"[rank{r}]:{node_name(r)}:{4000 + r}:{5000 + r} [{r % TASKS_PER_NODE}] NCCL WARN socketProgress: "
                "Connection reset by peer",
            )
        )
        cascade += [peer_gone, f"[rank{r}]:Traceback (most recent call last):",
                    f'[rank{r}]:  File "/workspace/train.py", line 412, in <module>']
    rnd.shuffle(cascade)
    for index in rnd.sample(range(len(cascade) - 1), len(cascade) // 50):  # two ranks' output on one line
        cascade[index] = cascade[index] + cascade[index + 1]
    for index in rnd.sample(range(len(cascade)), int(len(cascade) * truncate_share)):
        cascade[index] = cascade[index][: rnd.randrange(8, max(9, len(cascade[index]) - 1))]
    if kind == "xid":
        cause = [
            f"Nov 29 12:00:01 {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid={4000 + dead}, name=python, "
            "GPU has fallen off the bus.",
            f"[rank{dead}]:RuntimeError: CUDA error: unspecified launch failure",
        ]
        category = "gpu_fallen_off_bus"
    elif kind == "segfault":
        cause = [
            f"[rank{dead}]:Fatal Python error: Segmentation fault",
            f"srun: error: {node}: task {dead}: Segmentation fault",
        ]
        category = "segfault"
    else:
        cause = [f"srun: error: {node}: task {dead}: Killed"]
        category = "process_signal_killed"
    late = int(len(cascade) * late_share)
    tail = ["srun: error: Job step aborted: Waiting up to 32 seconds for job step to finish."]
    lines = head + cascade[:late] + cause + cascade[late:] + tail
    return Cascade(lines, len(head) + late, kind, dead, node, category)
