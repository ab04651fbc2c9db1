"""The fast path of ``FileAnalyzer.analyze`` gives exactly the verdicts of the line-by-line reference.

``_scan_block`` skips the full per-line parse (``hosts.parse_prefix``, the Root Cause reader,
``ProgressParser``) for plain ASCII lines whose prefix is at most an srun label and an NCCL
host:pid:tid and that hold none of the literals the full parse looks for; Megatron iteration
lines are parsed with two byte regexes and their samples built only when they survive thinning.
These tests feed it every prefix shape ``hosts`` knows, every built-in progress shape, the
look-alikes that must not be taken for them, Root Cause blocks, errors, CRLF and junk, cut at
many block sizes, and hold the result equal to ``analyze_by_line``'s.
"""

from __future__ import annotations

import io
import random

import pytest

from tests.unit.detect.equivalence import both
from trainguard.detect import catalog, hosts, matcher, progress, static, stream

PREFIXES = [
    "",
    "3: ",
    "  12: ",
    "\t5: ",
    "1234567: ",  # too many digits for an srun label
    "3: 4: ",  # stacked labels: the first one counts
    "[rank3]: ",
    "[default7]:",
    "3: [rank5]: ",
    "node12:3456:3470 [2] ",
    "7: node12:3456:3470 [2] ",
    "7: gpu-a01.cluster:41000:41000 [0] ",
    "7: node12:3456:3470 [2] node12:3456:3470 [2] ",
    "node3: ",
    "3: node3: ",
    "10.0.0.7: ",
    "RuntimeError: ",
    "srun: ",
    "Nov 29 12:00:01 node3 kernel: ",
    "2026-11-29T12:00:01.5+00:00 node4 kubelet[12]: ",
    "3: srun: error: node2: task 1: Killed ",
    "4: *** STEP 12.0 ON node5 CANCELLED ",
    "5: [PG 0 Rank 9] ",
    "6: [PG 1 Rank 2] ",
    "[Rank 4] ",
    "8: node9:1:2 [1] NCCL INFO comm 0x5 rank 13 nranks 16 cudaDev 1 ",
    "9: NVRM: Xid (PCI:0000:3b:00): 79, ",
]

BODIES = [
    "[2026-11-29 12:{m:02d}:{s:02d},123] iteration {i:8d}/ 500000 | consumed samples: {i}0 | "
    "elapsed time per iteration (ms): {ms} | tokens per second: 41000",
    "[2026-11-29 12:{m:02d}:{s:02d}] iteration {i}/500000| lm loss: 2.5",  # no time per iteration
    "iteration {i:8d}/ 500000 | elapsed time per iteration (ms): 0.0 | zero time",
    "iteration {i:8d}/ 500000 | elapsed time per iteration (ms): 1,0{s:02d}.5 |",
    "elapsed time per iteration (ms): 9.0 | then iteration {i}/ 10 | elapsed time per iteration (ms): {ms}",
    "reiteration {i}/ 10 | elapsed time per iteration (ms): {ms}",  # no word boundary
    "ITERATION {i}/ 10 | elapsed time per iteration (ms): {ms}",
    "iteration\t{i}\t/\t10\t| elapsed time per iteration (ms):\t{ms}",
    "saving checkpoint at iteration {i} to /ckpt",
    "step: {i}  loss: 2.1  memory: 30GiB  tps: 5{s:03d}",
    "Epoch 1: {i}/1000 [00:{s:02d}<01:00,  3.{s}it/s]",
    "{{'loss': 2.5, 'learning_rate': 1e-05, 'epoch': 0.{s}}}",
    "global_step={i} tokens/s={ms}",
    "throughput: {ms} samples/sec",
    "{ms} tok/s",
    "step {i} took 1.{s} s/it",
    "WARNING: Skipping step, loss scaler 0 reducing loss scale to 32768.0",
    "NCCL INFO Channel 03/0 : 12[3] -> 13[4] [send] via NET/IB/0/GDRDMA",
    "just a line with no numbers",
    "Root Cause (first observed failure):",
    "[0]:",
    "  host      : node{s}",
    "  rank      : {r} (local_rank: 1)",
    "  exitcode  : -6 (pid: 1234)",
]


def _random_log(seed: int, lines: int) -> bytes:
    rnd = random.Random(seed)
    errors = [line for spec in catalog.load_builtin().patterns for line in spec.examples]
    out: list[bytes] = []
    for i in range(lines):
        roll = rnd.random()
        if roll < 0.03:
            out.append(rnd.choice(errors).encode())
            continue
        if roll < 0.04:
            out.append(rnd.choice([b"", b"\r", b"   ", b"\x00\xff junk \x1b[31m", "caf\u00e9 step 3".encode()]))
            continue
        values = {"i": i, "m": i // 60 % 60, "s": i % 60, "ms": f"{rnd.uniform(800, 1200):.1f}", "r": rnd.randrange(64)}
        line = (rnd.choice(PREFIXES) + rnd.choice(BODIES).format(**values)).encode()
        if roll > 0.97:
            line += b"\r"  # CRLF
        out.append(line)
    return b"\n".join(out) + b"\n"


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("block_bytes", [61, 4096, static.BLOCK_BYTES])
def test_every_prefix_and_progress_shape_gives_the_reference_verdict(
    hyperscan: matcher.Matcher, seed: int, block_bytes: int
) -> None:
    fast, slow = both(hyperscan, _random_log(seed, 3000), block_bytes)
    assert fast == slow


def test_a_custom_progress_regex_gives_the_reference_verdict(hyperscan: matcher.Matcher) -> None:
    fast, slow = both(hyperscan, _random_log(11, 2000), 4096, progress_regex=r"lm loss: (?P<rate>[\d.]+)")
    assert fast == slow


def _ranks(rnd: random.Random, lines: int, slow_rank: int | None, prefix: str = "{r}: ") -> list[bytes]:
    out = []
    for i in range(lines):
        rank = i % 8
        ms = 1000.0 if slow_rank is None or rank != slow_rank or i < lines // 2 else 3000.0
        out.append(
            (
                prefix.format(r=rank)
                + f"[2026-11-29 12:{i // 8 // 60 % 60:02d}:{i // 8 % 60:02d},000] iteration {i // 8:8d}/ 500000 | "
                f"elapsed time per iteration (ms): {ms + rnd.uniform(-5, 5):.1f} | tokens per second: 40000"
            ).encode()
        )
    return out


FULL = static.MAX_SAMPLES


@pytest.mark.parametrize("max_samples", [50, 333, FULL])
@pytest.mark.parametrize("prefix", ["{r}: ", "{r}: node{r}:100:200 [0] ", "[rank{r}]: "])
def test_thinned_samples_and_a_slow_rank_give_the_reference_verdict(
    hyperscan: matcher.Matcher, monkeypatch: pytest.MonkeyPatch, max_samples: int, prefix: str
) -> None:
    # Few kept samples force the stride up several times mid-block, and the slow rank must be
    # found (or not) on the same samples either way.
    monkeypatch.setattr(static, "MAX_SAMPLES", max_samples)
    lines = _ranks(random.Random(4), 9600, slow_rank=5, prefix=prefix)
    lines.insert(1234, b"7: WARNING: Skipping step, loss scaler 0")
    data = b"\n".join(lines) + b"\n"
    for block_bytes in (997, static.BLOCK_BYTES):
        fast, slow = both(hyperscan, data, block_bytes)
        assert fast == slow
    if max_samples == FULL:
        verdict = static.FileAnalyzer(hyperscan, stream.DetectionSettings()).analyze("x.log", io.BytesIO(data))
        assert verdict.symptom.value == "straggler"
        assert verdict.suspect_ranks == [5]


def test_a_long_progress_line_across_a_block_edge(hyperscan: matcher.Matcher) -> None:
    # Longer than the cleaner's cap, so the fast path must leave it to the full parse.
    long = b"3: " + b"x" * 70_000 + b" iteration 5/ 10 | elapsed time per iteration (ms): 900.0"
    lines = _ranks(random.Random(6), 200, slow_rank=None)
    data = b"\n".join([*lines[:100], long, *lines[100:], long]) + b"\n"
    for block_bytes in (4096, 65_536, static.BLOCK_BYTES):
        fast, slow = both(hyperscan, data, block_bytes)
        assert fast == slow


def test_clean_iteration_lines_skip_the_per_line_parse(
    hyperscan: matcher.Matcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The point of the fast path: a labelled Megatron iteration line (or an NCCL INFO line) costs
    # neither a ``parse_prefix`` nor a ``ProgressParser.parse`` call; only the error line does.
    calls: list[str] = []
    original = hosts.parse_prefix

    def counting(text: str) -> hosts.Prefix:
        calls.append(text)
        return original(text)

    monkeypatch.setattr(hosts, "parse_prefix", counting)
    monkeypatch.setattr(progress.ProgressParser, "parse", lambda self, text: pytest.fail(f"parsed {text!r}"))
    error = catalog.load_builtin().patterns[0].examples[0]
    nccl = b"3: node3:100:200 [1] NCCL INFO Channel 03/0 : 12[3] -> 13[4] [send] via NET/IB/0/GDRDMA"
    lines = [*_ranks(random.Random(2), 300, slow_rank=None), nccl]
    data = b"\n".join([*lines, error.encode()]) + b"\n"
    result = static.FileAnalyzer(hyperscan, stream.DetectionSettings()).analyze("x.log", io.BytesIO(data))
    assert result.lines == 302
    assert calls == [error]


def test_line_time_with_a_cache_is_line_time() -> None:
    rnd = random.Random(9)
    for _ in range(5000):
        stamp = (
            f"{rnd.choice(['2026', '1999', '0001'])}-{rnd.randrange(15):02d}-{rnd.randrange(35):02d}"
            f"{rnd.choice('T _')}{rnd.randrange(26):02d}:{rnd.randrange(62):02d}:{rnd.randrange(62):02d}"
            f"{rnd.choice(['', '.5', ',123', '.123456', '.1234567'])}"
        )
        text = rnd.choice(["", "[", "3: [", "x" * 60]) + stamp + " iteration 1/ 2 |"
        assert static._line_time(text) == progress.line_time(text)
        assert static._line_time(text) == progress.line_time(text)  # the second time from the cache


def _reference_parse(text: str) -> progress.Progress | None:
    """``progress._parse_builtin`` as it was before its searches started at their literal: the reference."""
    p = progress
    if "iteration" in text and (m := p._MEGATRON.search(text)):
        ms = p._MEGATRON_MS.search(text)
        value = p._number(ms.group(1)) if ms else 0.0
        return p.Progress(int(m.group(1)), 1000.0 / value if value > 0 else None, "iter/s")
    if "step:" in text and (m := p._TITAN.search(text)):
        return p.Progress(int(m.group(1)), p._number(m.group(2)), "tokens/s")
    if "<" in text and (m := p._TQDM.search(text)):
        value = p._number(m.group(2))
        if m.group(3) == "s/it":
            value = 1.0 / value if value > 0 else 0.0
        return p.Progress(int(m.group(1)), value if value > 0 else None, "it/s")
    if "{'loss': " in text and p._HF_DICT.search(text):
        return p.Progress(None, None, "")
    step_m = p._STEP.search(text)
    step = int(step_m.group(1)) if step_m else None
    for regex in (p._TOKENS, p._TOKENS_AFTER, p._SAMPLES, p._SAMPLES_AFTER):
        if m := regex.search(text):
            unit = "tokens/s" if regex in (p._TOKENS, p._TOKENS_AFTER) else "samples/s"
            return p.Progress(step, p._number(m.group(1)), unit)
    if m := p._SEC_PER_STEP.search(text):
        value = p._number(m.group(1)) / (1000.0 if m.group(2).lower() == "ms" else 1.0)
        return p.Progress(step, 1.0 / value if value > 0 else None, "steps/s")
    if step is not None:
        return p.Progress(step, None, "")
    return None


def test_progress_searches_from_their_literal_find_the_same_match() -> None:
    # ``_parse_builtin`` starts its case-insensitive step and s/it searches where their literal
    # first occurs: on any text, the answer must be the one of searching the whole line.
    rnd = random.Random(12)
    words = [
        "step", "STEP", "global_step", "Global_Step", "iter", "ITERATION", "iteration", "xstep", "/step",
        "s/it", "ms/it", "S/Step", "Ms/iter", "s/", "1", "23", "4,5", "6.7", ".", ",", " ", "\t", "\x1c",
        "=", ":", "[", "]", "/", "m", "M", "x", "_", "tok/s", "samples/sec", "\u212a", "\u017f/it", "caf\u00e9",
    ]  # fmt: skip
    for _ in range(30_000):
        text = "".join(rnd.choice(words) for _ in range(rnd.randrange(1, 14)))
        assert progress._parse_builtin(text) == _reference_parse(text), text
