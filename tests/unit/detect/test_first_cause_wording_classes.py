"""Classes of wording found by the real-log batches (tests/data/real/HISTORY.md), one test each.

Each line here is the shape of a real pasted log, shortened; the real files are in the corpus. The
tests pin the rule, so a later change to the catalog or the ranking cannot undo it silently.
"""

from __future__ import annotations

import io

from trainguard.detect import catalog, matcher, static, stream
from trainguard.model import vocab

C = vocab.Category
A = vocab.Attribution


def _analyze(*lines: str) -> static.Result:
    compiled = matcher.build_matcher(catalog.load_builtin(), engine="python")
    data = ("\n".join(lines) + "\n").encode()
    return static.FileAnalyzer(compiled, stream.DetectionSettings()).analyze("t.log", io.BytesIO(data))


def test_a_scheduler_decision_names_no_suspect_node() -> None:
    result = _analyze(
        "slurmstepd: error: *** STEP 6053.0 ON DEL2212S020 CANCELLED AT 2024-04-23T12:18:08 ***",
        "slurmstepd: error: *** JOB 6053 ON DEL2212S020 CANCELLED AT 2024-04-23T12:18:10 DUE TO PREEMPTION ***",
        "srun: error: DEL2212S020: task 0: Terminated",
    )
    assert (result.category, result.attribution) == (C.PROCESS_SIGNAL_KILLED, A.SYSTEM)
    assert result.suspect_nodes == []


def test_a_node_failure_still_names_its_node() -> None:
    """Guard for the rule above: a node failure is not a decision, its node stays the suspect."""
    result = _analyze(
        "slurmstepd: error: *** JOB 88 ON gpu-a07 CANCELLED AT 2024-04-23T12:18:08 DUE TO NODE FAILURE ***"
    )
    assert result.attribution == A.HARDWARE
    assert result.suspect_nodes == ["gpu-a07"]


def test_the_agent_death_signal_in_numeric_wording_is_a_crash_whose_sender_is_unknown() -> None:
    result = _analyze(
        "W0409 07:28:49.530000 1359 torch/distributed/elastic/agent/server/api.py:719] Received 15 death signal, "
        "shutting down workers",
        "W0409 07:28:49.531000 1359 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 1365 "
        "closing signal SIGTERM",
    )
    assert (result.symptom, result.category, result.attribution) == (
        vocab.Symptom.CRASH, C.PROCESS_SIGNAL_KILLED, A.UNKNOWN)


def test_a_peer_reset_is_a_cascade_symptom_not_the_cause() -> None:
    result = _analyze(
        "node1:3321:3380 [0] NCCL WARN socketProgressOpt: Call to recv from 10.0.0.5<46614> failed : "
        "Connection reset by peer",
        "[rank5]: RuntimeError: CUDA error: an illegal memory access was encountered",
    )
    assert result.category == C.CUDA_ILLEGAL_MEMORY
    assert result.suspect_ranks == [5]


def test_a_socket_connect_failure_is_a_system_setup_failure() -> None:
    result = _analyze(
        "ubuntu:39964:40075 [0] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to 10.0.0.2<45763> failed : "
        "Software caused connection abort",
        "ubuntu:39964:40044 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer "
        "node1<57557>",
    )
    assert (result.category, result.attribution) == (C.NCCL_ERROR, A.SYSTEM)


def test_terminate_defers_to_its_what_line() -> None:
    result = _analyze(
        "terminate called after throwing an instance of 'std::runtime_error'",
        "what(): NCCL Error 1: unhandled cuda error",
    )
    assert result.category == C.NCCL_ERROR


def test_an_rdma_device_nccl_skips_is_not_a_crash() -> None:
    result = _analyze(
        "host7:80744:80744 [1] misc/ibvwrap.cc:212 NCCL WARN Call to ibv_open_device failed",
        "host7:80746:80746 [3] transport/net_ib.cc:149 NCCL WARN NET/IB : Unable to open device mlx5_59",
        "host7:80746:80746 [3] NCCL INFO Using network IB",
    )
    assert result.symptom == vocab.Symptom.HEALTHY


def test_the_store_error_after_retried_connect_warnings_is_a_rendezvous_failure() -> None:
    retried = (
        "[W socket.cpp:697] [c10d] The client socket has failed to connect to 10.0.0.1:29500 "
        "(errno: 110 - Connection timed out)."
    )
    assert _analyze(retried, retried).symptom == vocab.Symptom.HEALTHY
    result = _analyze(
        retried,
        "[E socket.cpp:753] [c10d] The client socket has failed to connect to any network address of (node1, 29500).",
    )
    assert (result.category, result.attribution) == (C.RENDEZVOUS_FAILURE, A.SYSTEM)


def test_sigkill_outside_python_is_a_host_oom_kill_of_unknown_sender() -> None:
    for line in (
        "command terminated with exit code 137",
        "[2022-05-27T11:37:57.377] _job_complete: JobId=127441 WTERMSIG 9",
    ):
        result = _analyze(line)
        assert (result.category, result.attribution) == (C.OOM_HOST_KILLED, A.UNKNOWN), line


def test_cuda_system_not_ready_under_nccl_is_the_nodes_setup() -> None:
    result = _analyze(
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1691, unhandled cuda error, "
        "NCCL version 2.19.3",
        "ncclUnhandledCudaError: Call to CUDA function failed.",
        "Last error:",
        "Cuda failure 802 'system not yet initialized'",
    )
    assert (result.category, result.attribution) == (C.NCCL_ERROR, A.SYSTEM)


def test_an_ib_completion_error_quoted_beside_remote_exited_is_still_hardware() -> None:
    """The peer-gone rule is by pattern: the IB error in ncclRemoteError's 'Last error' on the
    same line stays hardware evidence (batch 7 found one-line pastes of this)."""
    result = _analyze(
        "[E ProcessGroupNCCL.cpp:455] Some NCCL operations have failed or timed out. terminate called after throwing "
        "an instance of 'std::runtime_error' what(): NCCL error: remote process exited or there was a network error, "
        "NCCL version 2.14.3 ncclRemoteError: A call failed possibly due to a network error or a remote process "
        "exiting prematurely. Last error: NET/IB : Got completion from peer 11.214.147.122<39138> with error 12, "
        "opcode 0, len 0, vendor err 129"
    )
    assert (result.symptom, result.category, result.attribution) == (
        vocab.Symptom.CRASH, C.NCCL_NETWORK_IB, A.HARDWARE)


def test_the_proxy_report_defers_to_the_error_logged_before_it() -> None:
    result = _analyze(
        "a1:183006:183220 [1] misc/socket.cc:518 NCCL WARN Net : Call to recv from 10.2.8.7<58355> failed : "
        "Broken pipe",
        "a1:183006:183220 [1] proxy.cc:1119 NCCL WARN [Proxy Service 9] Failed to execute operation Connect from "
        "rank 9, retcode 6",
    )
    assert result.category == C.NCCL_NETWORK_IB


def test_the_store_based_barrier_timeout_is_a_rendezvous_failure() -> None:
    result = _analyze(
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for key: "
        "store_based_barrier_key:1 (world_size=2, worker_count=1, timeout=0:30:00)"
    )
    assert (result.category, result.attribution) == (C.RENDEZVOUS_FAILURE, A.UNKNOWN)
