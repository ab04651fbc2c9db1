"""Line prefixes -> node/rank, the rank map, and the elastic Root Cause block."""

from __future__ import annotations

import pytest

from trainguard.detect import hosts


@pytest.mark.parametrize(
    ("line", "node", "rank", "local_rank"),
    [
        ("3: RuntimeError: CUDA error: an illegal memory access was encountered", None, 3, None),
        ("[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout", None, 3, None),
        ("[default5]:Traceback (most recent call last):", None, 5, None),
        ("node12:3456:3470 [2] NCCL INFO Channel 00/02 :    0   1", "node12", None, 2),
        (
            "[rank10]:node3:41070:41130 [2] NCCL INFO comm 0x55 rank 10 nranks 16 cudaDev 2 - Init COMPLETE",
            "node3",
            10,
            2,
        ),
        ("gpu-a02: [rank9]: KeyError: 'x'", "gpu-a02", 9, None),
        ("srun: error: node2: task 1: Killed", "node2", 1, None),
        (
            "May 07 14:20:11 gpu-a02 kernel: NVRM: Xid (PCI:0000:2a:00): 79, pid=41063, GPU has fallen off the bus.",
            "gpu-a02",
            None,
            None,
        ),
        ("slurmstepd: error: *** STEP 812.0 ON node7 CANCELLED AT 2024-05-07T10:00:00 ***", "node7", None, None),
        ("[E ProcessGroupNCCL.cpp:457] [Rank 2] Watchdog caught collective operation timeout", None, 2, None),
        (
            "192.168.13.81: [rank19]:[E808 10:31:07.406255799 ProcessGroupNCCL.cpp:1895] [PG ID 1 PG GUID 1 Rank 19] "
            "Process group watchdog thread terminated with exception: CUDA error: unspecified launch failure",
            "192.168.13.81",
            19,
            None,
        ),
        ("10.0.0.7: 10.0.0.7:3468:3905 [4] NCCL INFO proxy.cc:698 -> 6", "10.0.0.7", None, 4),
    ],
)
def test_prefixes(line: str, node: str | None, rank: int | None, local_rank: int | None) -> None:
    found = hosts.parse_prefix(line)
    assert (found.node, found.rank, found.local_rank) == (node, rank, local_rank)


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: CUDA error: out of memory",
        "srun: Terminating StepId=81723.0",
        "12:00:01 INFO starting",
        "12:00:01: INFO starting",
        "1.5: loss went up",
        "3.2.1.0.9: version banner",
        "Traceback (most recent call last):",
    ],
)
def test_near_misses_name_no_node(line: str) -> None:
    assert hosts.parse_prefix(line).node is None


def test_kernel_xid_without_host_gives_pci() -> None:
    found = hosts.parse_prefix("[74889.644138] NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.")
    assert found.node is None
    assert found.pci == "0000:02:00"


def test_rank_map_block_distribution_and_learning() -> None:
    rank_map = hosts.RankMap(["node1", "node2", "node3"], tasks_per_node=4)
    assert rank_map.node_of(0) == "node1"
    assert rank_map.node_of(5) == "node2"
    assert rank_map.node_of(11) == "node3"
    assert rank_map.node_of(12) is None
    rank_map.observe(hosts.parse_prefix("5: node3:123:140 [1] NCCL INFO cudaDriverVersion 12040"))
    assert rank_map.node_of(5) == "node3"  # what the log shows beats the assumed layout
    assert rank_map.ranks_of("node3") == [5, 8, 9, 10, 11]


def test_rank_map_from_local_rank() -> None:
    rank_map = hosts.RankMap(["a1", "a2"], tasks_per_node=8)
    rank_map.observe(hosts.Prefix(node="a2", local_rank=3))
    assert rank_map.node_of(11) == "a2"
    assert hosts.RankMap().node_of(3) is None
    with pytest.raises(ValueError, match="tasks_per_node"):
        hosts.RankMap(["a"], tasks_per_node=0)


def test_root_cause_block() -> None:
    lines = [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2024-09-11_09:17:37",
        "  host      : 9018.idas",
        "  rank      : 1 (local_rank: 1)",
        "  exitcode  : -6 (pid: 886322)",
        "  error_file: <N/A>",
    ]
    reader = hosts.RootCauseReader()
    found = [r for n, text in enumerate(lines, 1) if (r := reader.feed(n, text)) is not None]
    assert len(found) == 1
    assert (found[0].host, found[0].rank, found[0].exitcode, found[0].lineno) == ("9018.idas", 1, -6, 2)
