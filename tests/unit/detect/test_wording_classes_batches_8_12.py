"""Classes of wording found by real-log batches 8-12 (tests/data/real/HISTORY.md), one test each.

Same shape as test_first_cause_wording_classes.py: each line is the shape of a real pasted log,
shortened (the real files are in the corpus); the test pins the class, not one file.
"""

from __future__ import annotations

import io

from trainguard.detect import catalog, matcher, static, stream
from trainguard.model import vocab

C = vocab.Category
A = vocab.Attribution
S = vocab.Symptom


def _analyze(*lines: str) -> static.Result:
    compiled = matcher.build_matcher(catalog.load_builtin(), engine="python")
    data = ("\n".join(lines) + "\n").encode()
    return static.FileAnalyzer(compiled, stream.DetectionSettings()).analyze("t.log", io.BytesIO(data))


def test_a_dataloader_workers_own_segfault_report_is_a_dataloader_fault() -> None:
    """PyTorch's worker signal handler prints this before (or instead of) the main process's error."""
    for line in (
        "ERROR: Unexpected segmentation fault encountered in worker.",
        "Epoch:   0%|          | 0/75 [00:00<?, ?ep/sERROR: Unexpected segmentation fault encountered in worker.",
        "ERROR: Unexpected segmentation fault encountered in DataLoader workers.",
    ):
        result = _analyze("Loaded 900 frames", line)
        assert (result.symptom, result.category, result.attribution) == (S.CRASH, C.DATALOADER_KILLED, A.UNKNOWN)


def test_the_cuda_11_nvlink_wording_is_nvlink_hardware_even_after_an_unrecognised_terminate() -> None:
    result = _analyze(
        "terminate called after throwing an instance of 'std::system_error'",
        "  what():  Transport endpoint is not connected",
        "terminate called after throwing an instance of 'c10::Error'",
        "  what():  CUDA error: uncorrectable NVLink error detected during the execution",
    )
    assert (result.category, result.attribution) == (C.NVLINK, A.HARDWARE)


def test_an_application_xid_before_a_context_switch_timeout_on_the_same_gpu_is_the_cause() -> None:
    result = _analyze(
        "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, "
        "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
        "[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, "
        "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005",
    )
    assert (result.category, result.attribution) == (C.CUDA_ERROR_OTHER, A.APPLICATION)


def test_a_context_switch_timeout_on_another_gpu_stays_hardware() -> None:
    """Guard for the rule above: only the same GPU's fault explains the timeout."""
    result = _analyze(
        "NVRM: Xid (PCI:0000:cb:00): 13, pid=1, name=python, Graphics SM Warp Exception",
        "NVRM: Xid (PCI:0000:1a:00): 109, pid=2, name=python, Ch 00000008, errorString CTX SWITCH TIMEOUT",
    )
    assert (result.category, result.attribution) == (C.GPU_XID_HARDWARE, A.HARDWARE)


def test_a_watchdog_reason_cut_by_terminal_wrapping_defers_to_the_next_line() -> None:
    result = _analyze(
        "terminate called after throwing an instance of 'std::runtime_error'",
        "  what():  [Rank 1] NCCL watchdog thread terminated with exception: [Rank 1",
        "] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=778778, OpT",
        "ype=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800413 ",
    )
    assert (result.symptom, result.category) == (S.HANG, C.NCCL_TIMEOUT)


def test_a_worker_traceback_re_raised_as_text_is_decided_by_its_last_line() -> None:
    """PyTorch < 1.3 re-raised a worker's exception as ``ExcType: Traceback (most recent call last):``."""
    result = _analyze(
        "    raise batch.exc_type(batch.exc_msg)",
        "OSError: Traceback (most recent call last):",
        '  File "/content/drive/SEGAN/data_generator.py", line 56, in __getitem__',
        "    pair = np.load(self.filepaths[idx])",
        "OSError: [Errno 5] Input/output error",
    )
    assert (result.category, result.attribution) == (C.FILESYSTEM_IO, A.SYSTEM)


def test_the_flight_recorder_dump_signal_for_a_peers_timeout_is_a_hang_with_no_suspect() -> None:
    result = _analyze(
        "[rank0]:[E804 23:05:54.816499929 ProcessGroupNCCL.cpp:1849] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
        "Observed flight recorder dump signal from another rank via TCPStore.",
        "[rank0]:[E804 23:05:54.817424543 ProcessGroupNCCL.cpp:1914] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
        "Received a dump signal due to a collective timeout from  rank 13 and we will try our best to dump the "
        "debug info. Last enqueued NCCL work: 1261, last completed NCCL work: 1259.",
    )
    assert (result.symptom, result.category, result.suspect_ranks) == (S.HANG, C.NCCL_TIMEOUT, [])


def test_thc_and_cutorch_unknown_error_30_is_a_cuda_error_of_unknown_cause() -> None:
    for line in (
        "THCudaCheck FAIL file=/opt/pytorch/aten/src/THC/THCGeneral.c line=70 error=30 : unknown error",
        "luajit: cuda runtime error (30) : unknown error at /tmp/luarocks_cutorch-scm-1-9927/cutorch/lib/THC/"
        "THCStorage.c:113",
    ):
        result = _analyze(line)
        assert (result.symptom, result.category, result.attribution) == (S.CRASH, C.CUDA_ERROR_OTHER, A.UNKNOWN)


def test_the_launchers_sigkill_after_an_ignored_sigterm_is_a_kill_of_unknown_sender() -> None:
    result = _analyze(
        "torch.distributed.elastic.multiprocessing.api: [WARNING] Unable to shutdown process 719448 via "
        "Signals.SIGTERM, forcefully exiting via Signals.SIGKILL"
    )
    assert (result.symptom, result.category, result.attribution) == (S.CRASH, C.PROCESS_SIGNAL_KILLED, A.UNKNOWN)


def test_an_ib_plugin_variant_completion_error_is_network_hardware() -> None:
    result = _analyze(
        "NET/IBP:Got completion from peer 7.6.13.83<36315> with status=12 opcode=32698 len=32696 vendor err 129 (Send)"
    )
    assert (result.category, result.attribution) == (C.NCCL_NETWORK_IB, A.HARDWARE)


def test_bash_padded_aborted_core_dumped_is_a_crash() -> None:
    result = _analyze(
        "./pretrain.sh: line 184: 2324239 Aborted                 (core dumped) litgpt pretrain --data FineWebDataset"
    )
    assert (result.symptom, result.category) == (S.CRASH, C.SEGFAULT)


def test_an_nvswitch_sxid_data_line_alone_is_not_a_crash() -> None:
    """``SXid (...): N, Data {...}`` is the register dump that follows the Fatal/Non-fatal line; alone it
    does not say which, so it is kept as evidence but never makes a crash by itself."""
    result = _analyze(
        "kern  :err   : 2025-01-25T10:34:54,859532+00:00 nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, "
        "Data {0x000001c0, 0x00bd5c8a, 0x00000500, 0x00000064, 0x00000000, 0x40008000, 0x5a001100}"
    )
    assert result.symptom == S.HEALTHY
    assert [e.pattern for e in result.context] == ["nvlink.nvswitch_sxid_data"]


# ---- classes found by batch 13 (collected after the changes above; tuned after its first sight) ----


def test_a_c10d_store_socket_timeout_is_a_rendezvous_failure() -> None:
    for lines in (
        ("Traceback (most recent call last):", '  File "<stdin>", line 1, in <module>', "RuntimeError: Socket Timeout"),
        (
            "torch.distributed.DistBackendError: [4] is setting up NCCL communicator and retrieving ncclUniqueId from "
            "[0] via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout",
        ),
    ):
        result = _analyze(*lines)
        assert (result.symptom, result.category, result.attribution) == (S.CRASH, C.RENDEZVOUS_FAILURE, A.UNKNOWN)


def test_an_old_nccl_connect_that_times_out_is_a_setup_failure_not_a_peer_gone() -> None:
    result = _analyze(
        "gpu-bql-144-103:18553:18611 [0] include/socket.h:360 WARN Call to connect failed : Connection timed out",
        "gpu-bql-144-103:18553:18612 [0] include/socket.h:371 WARN Connection closed by remote peer",
    )
    assert (result.category, result.attribution) == (C.NCCL_ERROR, A.SYSTEM)


def test_a_short_write_of_a_checkpoint_is_a_filesystem_error() -> None:
    result = _analyze(
        "/home/user/torch/install/bin/luajit: /home/user/torch/install/share/lua/5.1/torch/File.lua:210: write error: "
        "wrote 39776036 blocks instead of 41251350 at /tmp/luarocks_torch-scm-1-1419/torch7/lib/TH/THDiskFile.c:340"
    )
    assert (result.symptom, result.category, result.attribution) == (S.CRASH, C.FILESYSTEM_IO, A.SYSTEM)


# ---- classes found by batch 16 (collected after the batch 13-15 changes; tuned after its first sight) ----


def test_an_nvlink5_xid_marked_nonfatal_is_evidence_not_a_crash() -> None:
    """NVLink5 Xids (144-150) carry the unit's own severity word after the unit name: a ``Nonfatal``
    event is logged while the link keeps working, so alone it must not make a crash; the ``Fatal``
    form of the same Xids still does."""
    for line in (
        "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 "
        "0x00000000 0x00100000 0x00000004)",
        "kernel: NVRM: Xid (PCI:0000:5f:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 02",
        "NVRM: Xid (PCI:0000:01:00): 144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 0x00000000)",
    ):
        result = _analyze(line)
        assert result.symptom == S.HEALTHY, line
        assert [e.pattern for e in result.context] == ["xid.nvlink5_nonfatal", "xid.any"], line
    for line in (
        "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000)",
        "NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x00000000)",
    ):
        result = _analyze(line)
        assert (result.symptom, result.category, result.attribution) == (S.CRASH, C.NVLINK, A.HARDWARE), line
    # A Nonfatal event followed by a Fatal one on the link: the Fatal one decides.
    result = _analyze(
        "NVRM: Xid (PCI:0000:01:00): 144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 0x00000000)",
        "NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000)",
    )
    assert (result.symptom, result.category) == (S.CRASH, C.NVLINK)
