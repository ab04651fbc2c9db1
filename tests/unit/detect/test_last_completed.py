"""PyTorch >= 2.2 names how far each rank got (``last completed NCCL work: N``); the rank behind is the suspect.

The lines follow the ProcessGroupNCCL watchdog wording of PyTorch 2.2-2.5 as printed in public bug
reports: 2.2/2.3 ``[PG 1 Rank 1] Timeout at NCCL work: 158046, last enqueued NCCL work: 158046,
last completed NCCL work: 158045.``; 2.4+ adds a glog timestamp, ``[PG ID 0 PG GUID 0(default_pg)
Rank 1]`` and ``Exception (either an error or timeout) detected by watchdog at work: ...``. Before
this was read, a hang reported only in this wording named nobody (only ``SeqNum=`` was compared).
Each test runs the built-in catalog, so the lines must also be matched by the shipped patterns.
"""

from __future__ import annotations

import io

import pytest

from trainguard.detect import catalog, first_cause, hosts, matcher, static, stream
from trainguard.model import anomalies, clock, signals, vocab

CATALOG = catalog.load_builtin()
MATCHER = matcher.build_matcher(CATALOG, engine="python")
NODES = ("gpu-a01", "gpu-a02")


def timeout_2_2(rank: int, work: int, enqueued: int, completed: int, group: int = 0) -> str:
    """PyTorch 2.2/2.3 wording, ``torchrun --tee`` rank prefix, ``srun --label`` task id."""
    return (
        f"{rank}: [rank{rank}]:[E ProcessGroupNCCL.cpp:1537] [PG {group} Rank {rank}] Timeout at NCCL work: {work}, "
        f"last enqueued NCCL work: {enqueued}, last completed NCCL work: {completed}."
    )


def timeout_2_4(rank: int, work: int, enqueued: int, completed: int, group: int = 0) -> str:
    """PyTorch 2.4/2.5 wording (glog timestamp, PG ID/GUID), without a launcher prefix."""
    guid = "0(default_pg)" if group == 0 else f"{group + 7}"
    return (
        f"[rank{rank}]:[E1206 18:44:16.99493{rank}383 ProcessGroupNCCL.cpp:1785] [PG ID {group} PG GUID {guid} "
        f"Rank {rank}] Exception (either an error or timeout) detected by watchdog at work: {work}, "
        f"last enqueued NCCL work: {enqueued}, last completed NCCL work: {completed}."
    )


def teardown(rank: int) -> list[str]:
    return [
        f"{rank}: [rank{rank}]:[E ProcessGroupNCCL.cpp:577] [Rank {rank}] Some NCCL operations have failed or timed "
        "out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data.",
        f"{rank}: [rank{rank}]:[E ProcessGroupNCCL.cpp:583] [Rank {rank}] To avoid data inconsistency, we are taking "
        "the entire process down.",
    ]


def banner(rank: int) -> str:
    node = NODES[rank // 2]
    return (
        f"{rank}: [rank{rank}]:{node}:4107{rank}:4113{rank} [{rank % 2}] NCCL INFO comm 0x55d2c8f0 rank {rank} "
        f"nranks 4 cudaDev {rank % 2} busId 1b000 - Init COMPLETE"
    )


def rank_2_behind() -> list[str]:
    """Four ranks on two nodes; rank 2 (on gpu-a02) never completed work 2070, its peers did."""
    lines = [banner(r) for r in range(4)]
    lines += [f"0: [rank0]: iteration {i} | loss 2.31 | 812.4 samples/s" for i in range(2060, 2065)]
    for rank in range(4):
        if rank == 2:
            lines.append(timeout_2_2(rank, 2070, 2070, 2069))
        else:
            lines.append(timeout_2_2(rank, 2071, 2082, 2070))
        lines += teardown(rank)
    lines.append("srun: error: gpu-a01: tasks 0-1: Aborted")
    return lines


def analyze(lines: list[str]) -> static.Result:
    data = ("\n".join(lines) + "\n").encode()
    return static.FileAnalyzer(MATCHER, stream.DetectionSettings()).analyze("job.out", io.BytesIO(data))


def test_every_line_here_is_a_catalog_timeout() -> None:
    for line in (timeout_2_2(1, 5, 5, 4), timeout_2_4(1, 5, 7, 4)):
        hit = [CATALOG.by_id[p].category for p in MATCHER.match(line)]
        assert vocab.Category.NCCL_TIMEOUT in hit, line


def test_static_file_names_the_rank_that_completed_less() -> None:
    result = analyze(rank_2_behind())
    assert (result.symptom, result.category) == (vocab.Symptom.HANG, vocab.Category.NCCL_TIMEOUT)
    assert (result.suspect_ranks, result.suspect_nodes) == ([2], ["gpu-a02"])


def test_live_stream_names_the_rank_that_completed_less() -> None:
    now = clock.ManualClock()
    detector = stream.WorkloadDetector(
        MATCHER, stream.DetectionSettings(settle_s=5.0), now, workload="slurm/c/7", attempt=0,
        rank_map=hosts.RankMap(NODES, tasks_per_node=2),
    )
    found: list[anomalies.Anomaly] = []
    for lineno, text in enumerate(rank_2_behind(), start=1):
        found += detector.feed(signals.LogLine(text=text, lineno=lineno, received_at=now.now(), source="stdout"))
    now.advance(6.0)
    found += detector.tick()
    assert len(found) == 1
    assert (found[0].symptom, found[0].suspect_ranks, found[0].suspect_nodes) == (
        vocab.Symptom.HANG, [2], ["gpu-a02"],
    )


def evidence(lines: list[str]) -> list[anomalies.Evidence]:
    out = []
    for lineno, text in enumerate(lines, start=1):
        prefix = hosts.parse_prefix(text)
        for pattern_id in MATCHER.match(text):
            line = signals.LogLine(text=text, lineno=lineno, received_at=0.0, source="f")
            spec = CATALOG.by_id[pattern_id]
            out.append(stream.evidence_from_hit(spec, line, prefix, MATCHER.extract(pattern_id, text), at=None))
    return out


def test_2_4_wording_and_a_rank_that_completed_nothing() -> None:
    lines = [timeout_2_4(r, 1, 1, 0) for r in (0, 1, 3, 4, 5)] + [timeout_2_4(2, 1, 1, -1)]
    found = first_cause.find_first_cause(evidence(lines), ranks_seen=range(6))
    assert found is not None
    assert (found.symptom, found.suspect_ranks) == (vocab.Symptom.HANG, [2])


def test_counts_are_compared_only_within_one_process_group() -> None:
    # Every rank of the default group is at 7752; the tensor-parallel group counts its own collectives.
    lines = [timeout_2_4(r, 7753, 7755, 7752) for r in range(4)]
    lines += [timeout_2_4(r, 311, 311, 310, group=5) for r in range(4)]
    found = first_cause.find_first_cause(evidence(lines), ranks_seen=range(4))
    assert found is not None
    assert found.suspect_ranks == []  # nobody is behind inside a group, and groups are not compared
    lines[1] = timeout_2_4(1, 7752, 7752, 7751)
    found = first_cause.find_first_cause(evidence(lines), ranks_seen=range(4))
    assert found is not None
    assert found.suspect_ranks == [1]


def test_no_clear_minority_names_nobody() -> None:
    lines = [timeout_2_2(r, 9, 9, 8) for r in (0, 1)] + [timeout_2_2(r, 10, 10, 9) for r in (2, 3)]
    found = first_cause.find_first_cause(evidence(lines), ranks_seen=range(4))
    assert found is not None
    assert found.suspect_ranks == []


@pytest.mark.parametrize(
    ("line", "rank"),
    [
        ("[PG 0 Rank 7] Timeout at NCCL work: 52, last enqueued NCCL work: 52, last completed NCCL work: 51.", 7),
        ("[E ProcessGroupNCCL.cpp:1414] [PG 0 (default_pg) Rank 3] Process group watchdog thread terminated", 3),
        ("[E1103 07:34:57.460801783 ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID 0(default_pg) Rank 1] Timeout", 1),
        ("[E318 07:39:53.792772442 ProcessGroupNCCL.cpp:1785] [PG ID 2 PG GUID 9 Rank 4] Exception", None),
    ],
)
def test_c10d_rank_of_the_default_group_is_the_global_rank(line: str, rank: int | None) -> None:
    # In another group the number is the rank inside that group, so it says nothing about the global rank.
    assert hosts.parse_prefix(line).rank == rank
