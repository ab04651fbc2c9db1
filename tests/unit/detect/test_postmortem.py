"""`trainguard detect` on finished logs that hang or straggle without an error line (detect/postmortem.py).

Each log is the ordinary text of the shape (issue 23): a silence after the last progress line
closed by the scheduler's time limit or by monitor lines, a hang after initialisation, per-rank
tables; and the healthy twins that must stay healthy (the excerpt ends, a clean save and stop,
no timestamps at all). Every case runs through the CLI and through both reading paths.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.detect import equivalence
from trainguard.cli import main
from trainguard.detect import matcher


def _steps(start_minute: int, count: int, every_s: int = 10) -> list[str]:
    lines = []
    for i in range(count):
        second = start_minute * 60 + i * every_s
        lines.append(
            f"2024-05-07 10:{second // 60:02d}:{second % 60:02d},100 - INFO - step {100 + i} | loss 2.{i % 10} "
            f"| 1.0{i % 10} s/it"
        )
    return lines


def _detect(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    """The JSON verdict, with the text format's summary line added as ``summary`` (JSON keys are fixed)."""
    path = tmp_path / "job.log"
    path.write_text(text + "\n", encoding="utf-8")
    assert main.main(["detect", "--format", "json", str(path)]) == 0
    result: dict[str, object] = json.loads(capsys.readouterr().out)
    assert main.main(["detect", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    result["summary"] = lines[1].strip() if len(lines) > 1 else ""
    return result


TIME_LIMIT = "slurmstepd: error: *** JOB 494583 ON node017 CANCELLED AT 2024-05-07T13:40:00 DUE TO TIME LIMIT ***"


def test_a_time_limit_hours_after_the_last_step_is_a_hang_with_both_lines_as_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = _steps(0, 30)
    result = _detect(tmp_path, "\n".join([*lines, TIME_LIMIT]), capsys)
    assert (result["symptom"], result["category"], result["attribution"]) == ("hang", "progress_stalled", "unknown")
    evidence = result["evidence"]
    assert isinstance(evidence, list)
    assert [e["line"] for e in evidence[:2]] == [30, 31]
    assert "step 129" in evidence[0]["text"] and "DUE TO TIME LIMIT" in evidence[1]["text"]
    assert len(evidence) == 2  # the time-limit line once, as the end of the silence
    assert (result["suspect_nodes"], result["suspect_ranks"]) == ([], [])  # the node it ended on is no culprit
    assert "3h35m" in str(result["summary"])


def test_monitor_lines_before_the_time_limit_are_no_sign_of_life(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monitor = [f"2024-05-07 {h:02d}:00:00,000 - INFO - heartbeat monitor: gpu util 100%" for h in (11, 12, 13)]
    teardown = [
        "[2024-05-07 13:40:02,000] torch.distributed.elastic.agent.server.api: [WARNING] Received Signals.SIGTERM "
        "death signal, shutting down workers",
        "2024-05-07 13:40:03,000 - ERROR - run_until_complete raised",
    ]
    result = _detect(tmp_path, "\n".join([*_steps(0, 30), *monitor, TIME_LIMIT, *teardown]), capsys)
    assert (result["symptom"], result["category"]) == ("hang", "progress_stalled")
    assert "DUE TO TIME LIMIT" in result["evidence"][1]["text"]  # type: ignore[index]


def test_a_time_limit_right_after_progress_stays_the_schedulers_kill(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cancel = TIME_LIMIT.replace("13:40:00", "10:05:00")
    result = _detect(tmp_path, "\n".join([*_steps(0, 30), cancel]), capsys)
    assert (result["symptom"], result["category"]) == ("crash", "process_signal_killed")


def test_monitor_lines_long_after_the_last_step_are_a_hang(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monitor = [f"2024-05-07 {h:02d}:00:00,000 - INFO - heartbeat monitor: job alive, gpu util 100%" for h in (11, 12)]
    result = _detect(tmp_path, "\n".join([*_steps(0, 20), *monitor]), capsys)
    assert (result["symptom"], result["category"]) == ("hang", "progress_stalled")
    assert "heartbeat" in result["evidence"][1]["text"]  # type: ignore[index]


def test_a_hang_after_initialisation_without_any_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = "\n".join(
        [
            "2024-05-07 10:00:00,000 - INFO - Starting training with 16 ranks",
            "[2024-05-07 11:30:00,000] torch.distributed.elastic.agent.server.api: [WARNING] Received Signals.SIGTERM "
            "death signal, shutting down workers",
        ]
    )
    result = _detect(tmp_path, text, capsys)
    assert (result["symptom"], result["category"]) == ("hang", "progress_stalled")
    assert "initialisation" in str(result["summary"])


def test_a_save_is_a_sign_of_life_not_an_ending(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [*_steps(0, 20), "2024-05-07 10:04:00,000 - INFO - Saving model checkpoint to /ckpt/step_120", TIME_LIMIT]
    result = _detect(tmp_path, "\n".join(lines), capsys)
    assert (result["symptom"], result["category"]) == ("hang", "progress_stalled")
    assert "Saving model checkpoint" in result["evidence"][0]["text"]  # type: ignore[index]
    assert "its last line of its own" in str(result["summary"])


def test_an_excerpt_that_ends_mid_run_and_a_clean_stop_stay_healthy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _detect(tmp_path, "\n".join(_steps(0, 40)), capsys)["symptom"] == "healthy"
    clean = [
        *_steps(0, 20),
        "2024-05-07 10:04:00,000 - INFO - Saving checkpoint to /ckpt/step_120, training finished",
        "2024-05-07 12:30:00,000 - INFO - wandb: Synced 5 W&B file(s)",
    ]
    assert _detect(tmp_path, "\n".join(clean), capsys)["symptom"] == "healthy"
    evaluation = [*_steps(0, 20), "2024-05-07 12:30:00,000 - INFO - eval loss 1.93 on 20000 samples"]
    assert _detect(tmp_path, "\n".join(evaluation), capsys)["symptom"] == "healthy"


def test_kernel_lines_on_another_clock_close_no_silence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A training log with a dmesg excerpt pasted after it: the syslog dates are not the training clock.
    kernel = "May 29 03:12:44 node7 kernel: [812345.123456] NVRM: GPU at PCI:0000:3b:00: GPU-1 persistence mode on"
    assert _detect(tmp_path, "\n".join([*_steps(0, 20), kernel]), capsys)["symptom"] == "healthy"


def test_without_timestamps_the_output_says_the_log_alone_cannot_tell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [f"Epoch: [1][{4500 + i}/5000], Time: 2.27, Loss: 2.13 | step {4500 + i}" for i in range(10)]
    result = _detect(tmp_path, "\n".join(lines), capsys)
    assert result["symptom"] == "healthy"
    assert "no timestamps: the log alone cannot tell" in str(result["summary"])


TABLE = """\
[step 173] step_time=381.06s
     rank   data_time   step_time
      144     332.459      48.455
      145     332.214      48.553
      146     195.487     185.265
      160       0.053     381.009
      328       0.025     381.041
      138       0.022     381.038
      139       0.019     381.038"""


def test_a_per_rank_table_names_the_slow_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = _detect(tmp_path, TABLE, capsys)
    assert (result["symptom"], result["category"]) == ("straggler", "throughput_drop")
    assert result["suspect_ranks"] == [144, 145, 146]
    assert "data_time" in str(result["summary"])


def test_a_per_rank_table_in_line_and_noise_in_tiny_columns_stay_healthy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [f"      {r}       0.0{r % 7 + 1}     1.0{r % 5}" for r in range(8)]
    result = _detect(tmp_path, "\n".join(["     rank   data_time   step_time", *rows]), capsys)
    assert result["symptom"] == "healthy"
    pair = "Train MinThroughput/Rank: 129.44TF/0\nTrain MaxThroughput/Rank: 129.54TF/2"
    assert _detect(tmp_path, pair, capsys)["symptom"] == "healthy"


def test_per_rank_step_and_wait_lines_name_the_rank_out_of_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    step = [f"[rank{r}] iter {i} step time: {4.8 if r == 5 else 1.2:.2f} s" for i in range(3) for r in range(8)]
    result = _detect(tmp_path, "\n".join(step), capsys)
    assert (result["symptom"], result["category"], result["suspect_ranks"]) == ("straggler", "throughput_drop", [5])
    assert "step_time" in str(result["summary"])
    # Synchronous data parallel: the others wait in all-reduce for the slow rank, which waits least.
    wait = [f"Rank {r} | allreduce wait (ms): {3 if r == 2 else 740 + r}" for r in range(6)]
    result = _detect(tmp_path, "\n".join(wait), capsys)
    assert (result["symptom"], result["suspect_ranks"]) == ("straggler", [2])
    assert "wait for them" in str(result["summary"])
    even = [f"[rank{r}] iter {i} step time: {1.2 + 0.01 * r:.2f} s" for i in range(3) for r in range(8)]
    assert _detect(tmp_path, "\n".join(even), capsys)["symptom"] == "healthy"
    timeouts = [
        f"[rank{r}]:[E1119 13:21:12.5 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
        f"timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for "
        f"{1800000 + r} milliseconds before timing out."
        for r in range(4)
    ]
    assert _detect(tmp_path, "\n".join(timeouts), capsys)["category"] == "nccl_timeout"


def test_a_min_max_per_rank_pair_far_apart_names_the_slow_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = " [2024-05-07 10:00:00] | MnRtt/Rnk: 3100.52ms/12 | MxRtt/Rnk: 9800.10ms/5 | MnPwr/Rnk: 410W/3"
    result = _detect(tmp_path, line, capsys)
    assert (result["symptom"], result["suspect_ranks"]) == ("straggler", [5])
    throughput = "Train MinThroughput/Rank: 40.10TF/7\nTrain MaxThroughput/Rank: 129.54TF/2"
    assert _detect(tmp_path, throughput.replace("\n", " "), capsys)["suspect_ranks"] == [7]


def test_the_shells_killed_after_the_process_own_memory_grew_is_the_applications(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grew = "available: 254.1 GB, used: 101.6 GB\nepoch 27 done\navailable: 252.7 GB, used: 140.0 GB\nKilled"
    result = _detect(tmp_path, grew, capsys)
    assert (result["category"], result["attribution"]) == ("oom_host_killed", "application")
    assert [e["pattern"] for e in result["evidence"]][-2:] == ["postmortem.host_memory_growth"] * 2  # type: ignore[union-attr]
    flat = "available: 254.1 GB, used: 101.6 GB\nepoch 27 done\navailable: 254.1 GB, used: 101.6 GB\nKilled"
    assert _detect(tmp_path, flat, capsys)["attribution"] == "unknown"
    assert _detect(tmp_path, "Training Started.\nKilled", capsys)["attribution"] == "unknown"


@pytest.mark.parametrize("block_bytes", [64, 300, 4096])
def test_block_and_line_reading_agree_on_post_mortem_verdicts(hyperscan: matcher.Matcher, block_bytes: int) -> None:
    cases = [
        "\n".join([*_steps(0, 30), TIME_LIMIT]),
        "\n".join([*_steps(0, 20), "2024-05-07 12:00:00,000 - INFO - heartbeat monitor: alive"]),
        "noise line\n" * 5 + TABLE + "\nafter the table\n",
        "available: 254.1 GB, used: 101.6 GB\n" + "x\n" * 40 + "available: 250 GB, used: 140.0 GB\nKilled\n",
        "\n".join(f"Epoch: [1][{i}/5000] step {i}" for i in range(100)),
        "\n".join(f"[rank{r}] iter {i} step time: {4.8 if r == 5 else 1.2:.2f} s" for i in range(9) for r in range(8)),
    ]
    for data in cases:
        fast, slow = equivalence.both(hyperscan, data.encode(), block_bytes=block_bytes)
        assert fast == slow
