"""The lines of ``cascade.py``: a 4,096-rank PyTorch/NCCL cascade and its first cause, as real jobs print them.

The wording follows PyTorch 2.4's ProcessGroupNCCL and torch elastic (the catalog's own examples in
``operator/trainguard/catalog/patterns.yaml``), each line under the srun ``--label`` prefix ``N: ``
of the rank that printed it, with ``RANKS_PER_NODE`` ranks per node (Slurm's block distribution).
"""

from __future__ import annotations

import random

RANKS_PER_NODE = 8


def node_name(rank: int) -> str:
    return f"gpu{rank // RANKS_PER_NODE:03d}"


def first_cause_lines(culprit: int) -> list[str]:
    """What the culprit rank prints: the Xid its GPU raised, then the CUDA error the process sees."""
    r = culprit
    return [
        f"{r}: NVRM: Xid (PCI:0000:3b:00): 79, pid={40000 + r}, name=python, GPU has fallen off the bus.",
        f"{r}: [rank{r}]: RuntimeError: CUDA error: unspecified launch failure",
        f"{r}: [rank{r}]: CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.",
    ]


_FRAMES = [
    "c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f2d6c6f6446 in {lib}/libc10.so)",
    "c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, "
    "1000l> > >) + 0x1d2 (0x7f2d6d9b0772 in {lib}/libtorch_cuda.so)",
    "c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x7f2d6d9b71b3 in {lib}/libtorch_cuda.so)",
    "c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d (0x7f2d6d9b8b9d in {lib}/libtorch_cuda.so)",
    "<unknown function> + 0xdc253 (0x7f2dbb2b0253 in /lib/x86_64-linux-gnu/libstdc++.so.6)",
    "<unknown function> + 0x94ac3 (0x7f2dbd2c1ac3 in /lib/x86_64-linux-gnu/libc.so.6)",
    "clone + 0x44 (0x7f2dbd352a04 in /lib/x86_64-linux-gnu/libc.so.6)",
]
_LIB = "/usr/local/lib/python3.10/dist-packages/torch/lib"


def rank_lines(r: int, culprit: int) -> list[str]:
    """One waiting rank's part of the cascade (PyTorch 2.4-style ProcessGroupNCCL output, ~49 lines)."""
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {r}]"
    e = f"{r}: [rank{r}]:[E1204 10:15:{32 + r % 2}.{774120 + r:09d} ProcessGroupNCCL.cpp"
    timeout = (f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1043, OpType=ALLREDUCE, "
               "NumelIn=8388608, NumelOut=8388608, Timeout(ms)=600000) ran for 600088 milliseconds before timing out.")
    host, local = node_name(r), r % RANKS_PER_NODE
    lines = [
        f"{e}:632] {timeout}",
        f"{e}:1664] {pg} Exception (either an error or timeout) detected by watchdog at work: 1043, last enqueued "
        "NCCL work: 1043, last completed NCCL work: 1042.",
        f"{e}:1709] {pg} Timeout at NCCL work: 1043, last enqueued NCCL work: 1043, last completed NCCL work: 1042.",
        f"{e}:630] {pg} Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
        "subsequent GPU operations might run on corrupted/incomplete data.",
        f"{e}:636] {pg} To avoid data inconsistency, we are taking the entire process down.",
        f"{e}:1414] {pg} Process group watchdog thread terminated with exception: {timeout}",
        f"{r}: Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609 "
        "(most recent call first):",
        *(f"{r}: frame #{i}: {frame.format(lib=_LIB)}" for i, frame in enumerate(_FRAMES)),
        f"{r}: ",
        f"{r}: terminate called after throwing an instance of 'c10::DistBackendError'",
        f"{r}:   what():  {pg} Process group watchdog thread terminated with exception: {timeout}",
        f"{r}: Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609 "
        "(most recent call first):",
        *(f"{r}: frame #{i}: {frame.format(lib=_LIB)}" for i, frame in enumerate(_FRAMES)),
        f"{r}: ",
        f"{r}: Exception raised from ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1418 "
        "(most recent call first):",
        *(f"{r}: frame #{i}: {frame.format(lib=_LIB)}" for i, frame in enumerate(_FRAMES)),
        f"{r}: ",
        f"{r}: {host}:{3000 + local}:{3100 + local} [{local}] NCCL INFO [Service thread] Connection closed by "
        f"localRank {local}",
        f"{r}: {host}:{3000 + local}:{3107 + local} [{local}] misc/socket.cc:538 NCCL WARN Net : Connection closed "
        f"by remote peer {node_name(culprit)}<{50000 + culprit}>",
        f"{r}: {host}:{3000 + local}:{3107 + local} [{local}] NCCL INFO transport/net.cc:1150 -> 6",
        f"{r}: [rank{r}]:[W1204 10:15:34.{100000 + r:09d} ProcessGroupNCCL.cpp:1250] Warning: WARNING: process "
        "group has NOT been destroyed before we destruct ProcessGroupNCCL. (function ~ProcessGroupNCCL)",
        f"{r}: [rank{r}]: Traceback (most recent call last):",
        f'{r}: [rank{r}]:   File "/workspace/pretrain_gpt.py", line 412, in <module>',
        f"{r}: [rank{r}]:     main()",
        f'{r}: [rank{r}]:   File "/workspace/pretrain_gpt.py", line 388, in train_step',
        f"{r}: [rank{r}]:     loss.backward()",
        f'{r}: [rank{r}]:   File "/usr/local/lib/python3.10/dist-packages/torch/autograd/__init__.py", line 266, in '
        "backward",
        f"{r}: [rank{r}]:     Variable._execution_engine.run_backward(",
        f"{r}: [rank{r}]: torch.distributed.DistBackendError: {pg} Process group watchdog thread terminated "
        f"with exception: {timeout}",
    ]
    if local == 0:  # the node's torchrun agent reports its workers' failure once
        lines += agent_summary(r)
    return lines


def agent_summary(r: int) -> list[str]:
    """torch elastic's ``ChildFailedError`` block of one node's agent (its first worker, SIGABRT)."""
    host = node_name(r)
    return [f"{r}: {text}" for text in (
        f"E1204 10:15:35.102000 {2200 + r} torch/distributed/elastic/multiprocessing/api.py:833] failed "
        f"(exitcode: -6) local_rank: 0 (pid: {2271 + r}) of binary: /usr/bin/python3",
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-12-04_10:15:35",
        f"  host      : {host}",
        f"  rank      : {r} (local_rank: 0)",
        f"  exitcode  : -6 (pid: {2271 + r})",
        "  error_file: <N/A>",
        f"  traceback : Signal 6 (SIGABRT) received by PID {2271 + r}",
        "============================================================",
    )]


def burst_lines(ranks: int, culprit: int, total: int, seed: int) -> list[str]:
    """The cascade of every rank but the culprit, interleaved (each rank's own lines stay in order),
    cut or repeated to about ``total`` lines."""
    per_rank = [rank_lines(r, culprit) for r in range(ranks) if r != culprit]
    rng = random.Random(seed)
    out: list[str] = []
    cursors = [0] * len(per_rank)
    live = list(range(len(per_rank)))
    while live and len(out) < total:
        rng.shuffle(live)
        step = []
        for i in live:
            chunk = per_rank[i][cursors[i]:cursors[i] + 4]  # a few lines at a time, as pipes interleave
            out.extend(chunk)
            cursors[i] += len(chunk)
            if cursors[i] < len(per_rank[i]):
                step.append(i)
        live = step
    return out[:total]


def progress(step: int, rank: int = 0) -> str:
    return (f"{rank}: [rank{rank}]: iteration {step}/100000 | consumed samples: {step * 512} | elapsed time per "
            f"iteration (ms): 912.4 | learning rate: 2.999E-04 | lm loss: 2.146E+00 | 561.2 samples/s\n")
