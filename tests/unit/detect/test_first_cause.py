"""First cause vs cascade over hand-built evidence (the catalog's categories, not its regexes)."""

from __future__ import annotations

from trainguard.detect import first_cause, hosts
from trainguard.model import anomalies, vocab

C = vocab.Category
S = vocab.Severity


def ev(
    line: int,
    category: vocab.Category,
    text: str = "x",
    *,
    severity: vocab.Severity = S.ERROR,
    node: str | None = None,
    rank: int | None = None,
    pattern: str = "test.p",
) -> anomalies.Evidence:
    return anomalies.Evidence(
        line=line, text=text, pattern=pattern, category=category, severity=severity, node=node, rank=rank
    )


def timeouts(first_line: int, ranks: range, seq: int = 52, skip: tuple[int, ...] = ()) -> list[anomalies.Evidence]:
    return [
        ev(
            first_line + i,
            C.NCCL_TIMEOUT,
            f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE)",
            rank=r,
        )
        for i, r in enumerate(r for r in ranks if r not in skip)
    ]


def test_hardware_after_timeouts_outranks_them() -> None:
    evidence = [
        *timeouts(10, range(16)),
        ev(40, C.GPU_FALLEN_OFF_BUS, "NVRM: Xid (PCI:0000:2a:00): 79", node="gpu-a02"),
    ]
    found = first_cause.find_first_cause(evidence)
    assert found is not None
    assert (found.symptom, found.category, found.attribution) == (
        vocab.Symptom.CRASH,
        C.GPU_FALLEN_OFF_BUS,
        vocab.Attribution.HARDWARE,
    )
    assert found.suspect_nodes == ["gpu-a02"]
    assert found.suspect_ranks == []
    assert found.evidence[0].line == 40
    assert len(found.evidence) == 17


def test_cuda_error_on_one_rank_before_timeouts_is_the_cause() -> None:
    rank_map = hosts.RankMap(["n1", "n2"], tasks_per_node=8)
    evidence = [
        ev(5, C.CUDA_ILLEGAL_MEMORY, "RuntimeError: CUDA error: an illegal memory access", rank=11),
        *timeouts(20, range(16), skip=(11,)),
    ]
    found = first_cause.find_first_cause(
        evidence, node_of=rank_map.node_of, hints={"test.p": vocab.Attribution.APPLICATION}
    )
    assert found is not None
    assert found.category == C.CUDA_ILLEGAL_MEMORY
    assert found.attribution == vocab.Attribution.APPLICATION
    assert (found.suspect_nodes, found.suspect_ranks) == (["n2"], [11])  # not every rank that timed out


def test_python_exception_vs_distributed_symptoms() -> None:
    cascade = ev(
        3, C.PYTHON_EXCEPTION, "RuntimeError: NCCL error: remote process exited or there was a network error", rank=0
    )
    cause = ev(9, C.PYTHON_EXCEPTION, "KeyError: 'input_ids'", rank=5)
    found = first_cause.find_first_cause([cascade, cause, *timeouts(30, range(8), skip=(5,))])
    assert found is not None
    assert (found.category, found.suspect_ranks) == (C.PYTHON_EXCEPTION, [5])


def test_earliest_wins_within_a_class_and_specific_beats_generic_on_one_line() -> None:
    evidence = [
        ev(7, C.PYTHON_EXCEPTION, "OSError: [Errno 122] Disk quota exceeded", rank=0),
        ev(7, C.FILESYSTEM_IO, "OSError: [Errno 122] Disk quota exceeded", rank=0),
        ev(9, C.OOM_GPU, "CUDA out of memory", rank=3),
    ]
    found = first_cause.find_first_cause(evidence)
    assert found is not None
    assert found.category == C.FILESYSTEM_IO


def test_timeouts_only_is_a_hang_naming_the_missing_rank() -> None:
    found = first_cause.find_first_cause(timeouts(1, range(8), skip=(6,)), ranks_seen=range(8))
    assert found is not None
    assert (found.symptom, found.category, found.attribution) == (
        vocab.Symptom.HANG,
        C.NCCL_TIMEOUT,
        vocab.Attribution.UNKNOWN,
    )
    assert found.suspect_ranks == [6]


def test_lagging_seqnum_names_the_rank_behind() -> None:
    evidence = [*timeouts(1, range(8), seq=120, skip=(3,)), *timeouts(20, range(3, 4), seq=119)]
    found = first_cause.find_first_cause(evidence, ranks_seen=range(8))
    assert found is not None
    assert found.suspect_ranks == [3]


def test_everyone_timed_out_names_nobody_and_collateral_root_cause_is_ignored() -> None:
    abort_root = hosts.RootCause(lineno=99, host="n1", rank=0, exitcode=-6)
    found = first_cause.find_first_cause(timeouts(1, range(8)), ranks_seen=range(8), root_cause=abort_root)
    assert found is not None
    assert (found.suspect_nodes, found.suspect_ranks) == ([], [])
    killed_root = hosts.RootCause(lineno=99, host="n2", rank=12, exitcode=-9)
    found = first_cause.find_first_cause(timeouts(1, range(16)), ranks_seen=range(16), root_cause=killed_root)
    assert found is not None
    assert (found.suspect_nodes, found.suspect_ranks) == (["n2"], [12])


def test_killed_task_before_timeouts() -> None:
    evidence = [
        ev(50, C.PROCESS_SIGNAL_KILLED, "srun: error: node2: task 6: Killed", node="node2", rank=6),
        *timeouts(60, range(16), skip=(6,)),
    ]
    found = first_cause.find_first_cause(evidence)
    assert found is not None
    assert (found.category, found.suspect_nodes, found.suspect_ranks) == (C.PROCESS_SIGNAL_KILLED, ["node2"], [6])


def test_warnings_alone_are_no_cause_but_hardware_warnings_beat_cascades() -> None:
    assert (
        first_cause.find_first_cause(
            [ev(1, C.NCCL_NETWORK_IB, severity=S.WARNING), ev(2, C.PYTHON_EXCEPTION, severity=S.WARNING)]
        )
        is None
    )
    ib = ev(
        5,
        C.NCCL_NETWORK_IB,
        "NET/IB : Got completion from peer with status=12",
        severity=S.WARNING,
        node="node2",
        rank=7,
    )
    found = first_cause.find_first_cause([*timeouts(1, range(4)), ib])
    assert found is not None
    assert (found.category, found.suspect_nodes) == (C.NCCL_NETWORK_IB, ["node2"])


def test_place_borrowed_from_a_second_report_of_the_same_event() -> None:
    evidence = [
        ev(50, C.OOM_HOST_KILLED, "slurmstepd: error: Detected 1 oom_kill event", severity=S.FATAL),
        ev(51, C.OOM_HOST_KILLED, "srun: error: node4: task 12: Out Of Memory", node="node4", rank=12),
    ]
    found = first_cause.find_first_cause(evidence)
    assert found is not None
    assert (found.suspect_nodes, found.suspect_ranks) == (["node4"], [12])


def test_cuda_error_reported_by_the_watchdog_is_the_cause_not_a_cascade() -> None:
    line = (
        "[rank29]:[E1002 12:20:55.123831168 ProcessGroupNCCL.cpp:1923] [PG ID 5 PG GUID 83(TENSOR_MODEL_PARALLEL_GROUP)"
        " Rank 1] Process group watchdog thread terminated with exception: CUDA error: unspecified launch failure"
    )
    evidence = [
        ev(3, C.NCCL_ERROR, line, severity=S.FATAL, rank=29, pattern="nccl.watchdog_thread_terminated"),
        ev(3, C.CUDA_ERROR_OTHER, line, rank=29, pattern="cuda.unspecified_launch_failure"),
    ]
    found = first_cause.find_first_cause(evidence)
    assert found is not None
    assert (found.symptom, found.category) == (vocab.Symptom.CRASH, C.CUDA_ERROR_OTHER)
    assert found.suspect_ranks == [29]
    wrapped_timeout = (
        "[Rank 5] Process group watchdog thread terminated with exception: [Rank 5] Watchdog caught collective"
        " operation timeout: WorkNCCL(SeqNum=9141, OpType=_ALLGATHER_BASE, Timeout(ms)=600000)"
    )
    assert first_cause.classify(ev(1, C.NCCL_ERROR, wrapped_timeout, severity=S.FATAL)) == first_cause.Rank.CASCADE


def test_teardown_printed_before_the_timeout_leaves_a_hang() -> None:
    evidence = [
        ev(6, C.SEGFAULT, "terminate called after throwing an instance of 'c10::DistBackendError'", severity=S.FATAL),
        ev(
            7,
            C.NCCL_TIMEOUT,
            "  what():  [PG 3 Rank 5] Process group watchdog thread terminated with exception: [Rank 5] Watchdog"
            " caught collective operation timeout: WorkNCCL(SeqNum=9141, OpType=_ALLGATHER_BASE)",
            rank=5,
        ),
    ]
    found = first_cause.find_first_cause(evidence)
    assert found is not None
    assert (found.symptom, found.category) == (vocab.Symptom.HANG, C.NCCL_TIMEOUT)
    assert found.evidence[0].line == 7


def test_attribution_hint_comes_from_a_second_report_of_the_same_event() -> None:
    evidence = [
        ev(5, C.OOM_HOST_KILLED, "slurm_script: line 28:  8156 Killed   python3", pattern="process.bash_killed"),
        ev(6, C.OOM_HOST_KILLED, "slurmstepd: error: Detected 1 oom-kill event", pattern="oom.slurm_oom_kill_event"),
    ]
    hints = {
        "process.bash_killed": vocab.Attribution.UNKNOWN,
        "oom.slurm_oom_kill_event": vocab.Attribution.APPLICATION,
    }
    found = first_cause.find_first_cause(evidence, hints=hints)
    assert found is not None
    assert (found.category, found.attribution) == (C.OOM_HOST_KILLED, vocab.Attribution.APPLICATION)
    assert found.evidence[0].line == 5
    alone = first_cause.find_first_cause(evidence[:1], hints=hints)
    assert alone is not None
    assert alone.attribution == vocab.Attribution.UNKNOWN


def test_exception_wrapping_a_timeout_is_the_timeout() -> None:
    line = (
        "[rank2]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out"
        " waiting 1800000ms for recv operation to complete"
    )
    evidence = [
        ev(7, C.PYTHON_EXCEPTION, line, rank=2, pattern="python.exception_line"),
        ev(7, C.NCCL_TIMEOUT, line, rank=2, pattern="gloo.timeout"),
    ]
    found = first_cause.find_first_cause(evidence)
    assert found is not None
    assert (found.symptom, found.category) == (vocab.Symptom.HANG, C.NCCL_TIMEOUT)
    plain = first_cause.find_first_cause([ev(7, C.PYTHON_EXCEPTION, "RuntimeError: shapes differ", rank=2)])
    assert plain is not None
    assert (plain.symptom, plain.category) == (vocab.Symptom.CRASH, C.PYTHON_EXCEPTION)
