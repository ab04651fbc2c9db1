"""Benchmark: `trainguard detect` and `trainguard scan --stats` beside ripgrep, on one log, in one run.

Generates (or takes with --log) a multi-rank Megatron-style training log, the one
``benchmarks/matcher.py`` writes: srun ``N: `` labels of 64 ranks, iteration lines with rates,
NCCL INFO lines, warnings, tqdm carriage-return bars and rare catalog error lines. Then runs, as
subprocesses (argv lists) after a read that warms the page cache, ``--repeat`` times each:

- ``trainguard detect --format json LOG``
- ``trainguard scan --stats LOG``
- ``rg -c -f PATTERNS LOG`` (PATTERNS: ``trainguard patterns export --format lines``)

and prints one JSON object: per tool the best wall time, its CPU time (user + system, which the
other jobs on a shared machine disturb less) and peak RSS, MB/s, and the ratios to ripgrep (wall
and CPU; > 1 means faster than ripgrep). Exits 1 when scan's matched-line count differs from
ripgrep's, 2 when a tool is missing or fails.

    .venv/bin/python benchmarks/static.py [--size 300MB] [--log FILE] [--repeat 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import matcher as matcher_bench  # the log generator lives beside this script

DECIMAL = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}


def parse_size(text: str) -> int:
    """``300MB`` (decimal, like the MB/s figures), ``256MiB`` (binary) or a byte count."""
    value = text.strip().lower()
    if value.endswith("ib"):
        return matcher_bench.parse_size(value)
    value = value.removesuffix("b")
    unit = value[-1] if value and value[-1] in DECIMAL else ""
    return int(float(value[: len(value) - len(unit)]) * DECIMAL[unit])


def measure(argv: list[str]) -> dict[str, Any]:
    """Run ``argv`` once: wall seconds, CPU seconds, peak RSS (MB), exit code and stdout."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        stdout = out.read().decode()
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss_mb": usage.ru_maxrss / 1024,  # Linux reports KiB
        "rc": process.returncode,
        "stdout": stdout,
    }


def best(argv: list[str], repeat: int, ok: tuple[int, ...] = (0,)) -> dict[str, Any]:
    """The run with the lowest wall time of ``repeat``; the highest RSS seen."""
    runs = [measure(argv) for _ in range(repeat)]
    for run in runs:
        if run["rc"] not in ok:
            raise RuntimeError(f"{argv[0]} ... exited {run['rc']}")
    chosen = min(runs, key=lambda r: r["wall_s"])
    chosen["rss_mb"] = max(r["rss_mb"] for r in runs)
    chosen["cpu_s"] = min(r["cpu_s"] for r in runs)
    return chosen


def figures(run: dict[str, Any], mb: float) -> dict[str, float]:
    return {
        "wall_s": round(run["wall_s"], 3),
        "cpu_s": round(run["cpu_s"], 3),
        "mb_per_s": round(mb / run["wall_s"], 1),
        "mb_per_cpu_s": round(mb / run["cpu_s"], 1),
        "rss_mb": round(run["rss_mb"], 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=300 * 10**6, help="log size to generate (default 300MB)")
    parser.add_argument("--log", type=Path, default=None, help="use this log instead of generating one")
    parser.add_argument("--workdir", type=Path, default=Path(__file__).parent / "out", help="where the log goes")
    parser.add_argument("--repeat", type=int, default=3, help="runs per tool; the fastest counts (default 3)")
    parser.add_argument("--keep", action="store_true", help="keep the generated log (default: delete it)")
    args = parser.parse_args(argv)
    rg = shutil.which("rg")
    if rg is None:
        print("benchmarks/static.py: ripgrep (rg) is not installed (apt-get install ripgrep)", file=sys.stderr)
        return 2
    trainguard = [sys.executable, "-m", "trainguard.cli.main"]
    args.workdir.mkdir(parents=True, exist_ok=True)
    log = args.log or args.workdir / f"megatron-{args.size}.log"
    patterns: Path | None = None
    try:
        if args.log is None:
            matcher_bench.generate(log, args.size)
        with log.open("rb") as handle:  # warm the page cache: neither tool pays for the first read
            while handle.read(64 << 20):
                pass
        exported = subprocess.run([*trainguard, "patterns", "export", "--format", "lines"], capture_output=True,
                                  text=True, check=True)
        with tempfile.NamedTemporaryFile("w", suffix=".patterns", dir=args.workdir, delete=False) as handle:
            handle.write(exported.stdout)
            patterns = Path(handle.name)
        detect = best([*trainguard, "detect", "--format", "json", str(log)], args.repeat)
        scan = best([*trainguard, "scan", "--stats", str(log)], args.repeat)
        ripgrep = best([rg, "-c", "-f", str(patterns), str(log)], args.repeat, ok=(0, 1))
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"benchmarks/static.py: {exc}", file=sys.stderr)
        return 2
    finally:
        if patterns is not None:
            patterns.unlink(missing_ok=True)
        if args.log is None and not args.keep:
            log.unlink(missing_ok=True)
    size = log.stat().st_size if log.exists() else args.size
    mb = size / 1e6
    verdict = json.loads(detect["stdout"].splitlines()[0])
    stats = json.loads(scan["stdout"])
    rg_matched = int(ripgrep["stdout"].strip() or 0)
    report = {
        "bytes": size,
        "lines": stats["lines"],
        "detect": {**figures(detect, mb), "symptom": verdict["symptom"], "category": verdict["category"]},
        "scan": {**figures(scan, mb), "matched_lines": stats["matched_lines"], "scan_only_s": stats["seconds"]},
        "rg": {**figures(ripgrep, mb), "matched_lines": rg_matched},
        "detect_over_rg": round(ripgrep["wall_s"] / detect["wall_s"], 3),
        "detect_over_rg_cpu": round(ripgrep["cpu_s"] / detect["cpu_s"], 3),
        "scan_over_rg": round(ripgrep["wall_s"] / scan["wall_s"], 3),
        "scan_over_rg_cpu": round(ripgrep["cpu_s"] / scan["cpu_s"], 3),
        "counts_equal": stats["matched_lines"] == rg_matched,
        "repeat": args.repeat,
    }
    print(json.dumps(report))
    return 0 if report["counts_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
