"""Progress lines of common trainers, and their throughput (higher is better)."""

from __future__ import annotations

import pytest

from trainguard.detect import progress


@pytest.mark.parametrize(
    ("line", "step", "rate"),
    [
        (
            " iteration      100/    1000 | consumed samples: 51200 | elapsed time per iteration (ms): 1250.0 | "
            "throughput per GPU (TFLOP/s/GPU): 180.2 | lm loss: 2.3E+00 |",
            100,
            0.8,
        ),
        ("step: 10  loss:  7.9421  memory: 61.22GiB(77.34%)  tps: 12,345  tflops: 150.2  mfu: 30.1%", 10, 12345.0),
        ("12/100 [00:10<01:10,  1.25it/s]", 12, 1.25),
        ("Epoch 0:  10%|#         | 100/1000 [00:40<06:00,  2.50it/s, v_num=3, loss=1.2]", 100, 2.5),
        (" 40/500 [01:20<15:20,  2.00s/it]", 40, 0.5),
        ("[Rank 0] step=100, skipped=0, lr=[0.0001], mom=[(0.9, 0.95)]", 100, None),
        ("step 100 | loss 2.3 | tokens/s: 45,000", 100, 45000.0),
        ("iter 20: 812.4 samples/sec", 20, 812.4),
        ("global_step=300 loss=1.1 0.52 s/it", 300, 1 / 0.52),
    ],
)
def test_builtin_patterns(line: str, step: int | None, rate: float | None) -> None:
    found = progress.ProgressParser().parse(line)
    assert found is not None
    assert found.step == step
    if rate is None:
        assert found.rate is None
    else:
        assert found.rate == pytest.approx(rate)


def test_hf_trainer_dict_is_progress_without_rate() -> None:
    found = progress.ProgressParser().parse(
        "{'loss': 1.2345, 'grad_norm': 0.51, 'learning_rate': 1.9e-05, 'epoch': 0.5}"
    )
    assert found is not None
    assert found.rate is None


@pytest.mark.parametrize(
    "line",
    [
        "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0",
        "NCCL INFO Channel 00/02 :    0   1   2   3",
        "stepping into the data loader",
        '  File "train.py", line 88, in step',
        "",
    ],
)
def test_not_progress(line: str) -> None:
    assert progress.ProgressParser().parse(line) is None


def test_custom_regex_groups() -> None:
    parser = progress.ProgressParser(r"batch (?P<step>\d+) took (?P<seconds>[\d.]+)s")
    found = parser.parse("batch 7 took 0.25s")
    assert found is not None
    assert (found.step, found.rate) == (7, 4.0)
    assert parser.parse(" iteration 100/ 1000 | elapsed time per iteration (ms): 1.0 |") is None
    with pytest.raises(ValueError, match="does not compile"):
        progress.ProgressParser("(unclosed")


def test_line_time() -> None:
    assert progress.line_time("[2024-05-07 00:00:10] iteration 10/100 |") == 1715040010.0
    assert progress.line_time("2024-05-07T00:00:10.5 x") == 1715040010.5
    assert progress.line_time("x" * 70 + " a date in the message 2024-05-07 00:00:10") is None
    assert progress.line_time("2024-13-07 00:00:10") is None
    assert progress.line_time("0000-01-01 00:00:00 iteration 5/ 10") is None  # year 0: not a date
