"""Benchmark: `trainguard scan --stats` against ripgrep on the same synthetic training log.

Generates (streamed, never held in memory) a log of --size bytes, default 1 GiB: mostly healthy
training output (Megatron-style iteration lines, NCCL INFO lines, warnings, tqdm carriage-return
bars, timestamps, srun label prefixes) with rare error lines drawn from the catalog's examples.
Then runs both tools as subprocesses (argv lists) and checks the matched-line counts are equal.
Prints one JSON object; exits 1 if the counts differ, 2 if a tool is missing or fails.

    .venv/bin/python benchmarks/matcher.py [--size 1GiB] [--workdir benchmarks/out] [--engine auto]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trainguard.detect import catalog as catalogs

UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
ERROR_RATE = 1 / 20_000
"""Share of lines that are catalog error examples: a few hundred per GB, like a real failing run."""


def parse_size(text: str) -> int:
    """``1GiB``, ``200MiB``, ``512k`` or a plain byte count (binary units)."""
    found = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?) *([kmg]?)(?:i?b)?", text.strip().lower())
    if found is None:
        raise argparse.ArgumentTypeError(f"bad size {text!r}; use e.g. 1GiB, 200MiB, 5000000")
    return int(float(found.group(1)) * UNITS[found.group(2)])


def healthy_pool(rnd: random.Random, size: int = 20_000) -> list[str]:
    """Distinct healthy lines; sampled with replacement while writing."""
    pool: list[str] = []
    hosts = [f"node{n:03d}" for n in range(1, 33)]
    for i in range(size):
        kind = rnd.random()
        clock = f"{rnd.randrange(24):02d}:{rnd.randrange(60):02d}:{rnd.randrange(60):02d}"
        stamp = f"[2026-11-29 {clock},{rnd.randrange(1000):03d}]"
        label = f"{rnd.randrange(64)}: " if rnd.random() < 0.5 else ""
        if kind < 0.70:
            line = (
                f"{label}{stamp} iteration {i:8d}/ 500000 | consumed samples: {i * 512:12d} | "
                f"elapsed time per iteration (ms): {rnd.uniform(800, 1200):.1f} | "
                f"learning rate: {rnd.uniform(1e-5, 3e-4):.3E} | "
                f"global batch size: 512 | lm loss: {rnd.uniform(1.8, 3.2):.6E} | loss scale: 1.0 | "
                f"grad norm: {rnd.uniform(0.2, 2):.3f} | tokens per second: {rnd.randrange(38000, 45000)}"
            )
        elif kind < 0.85:
            host = rnd.choice(hosts)
            line = (
                f"{label}{host}:{rnd.randrange(1000, 99999)}:{rnd.randrange(1000, 99999)} [{rnd.randrange(8)}] "
                f"NCCL INFO Channel {rnd.randrange(32):02d}/0 : {rnd.randrange(256)}[{rnd.randrange(8)}] -> "
                f"{rnd.randrange(256)}[{rnd.randrange(8)}] [send] via NET/IB/{rnd.randrange(8)}/GDRDMA"
            )
        elif kind < 0.90:
            line = (
                f"{label}{stamp} WARNING: torch.utils.checkpoint: the use_reentrant parameter should be passed "
                "explicitly; Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0"
            )
        elif kind < 0.95:
            bars = "".join(
                f" {p:3d}%|{'#' * (p // 10):10s}| {p}/100 [00:{p:02d}<00:10, 9.5it/s]\r" for p in range(0, 101, 20)
            )
            line = f"{label}Loading checkpoint shards: {bars}"
        else:
            line = (
                f"{label}{stamp} [INFO] saving checkpoint at iteration {i} to /checkpoints/run42 "
                f"(wandb: Network error (ConnectionError), entering retry loop.) validation: 0 errors"
            )
        pool.append(line)
    return pool


def generate(path: Path, size: int, seed: int = 42) -> int:
    """Write about ``size`` bytes of log to ``path``; return the number of error lines injected."""
    rnd = random.Random(seed)
    pool = [line.encode() + b"\n" for line in healthy_pool(rnd)]
    catalog = catalogs.load_builtin()
    errors = [line.encode() + b"\n" for spec in catalog.patterns for line in spec.examples]
    written = injected = 0
    with path.open("wb") as out:
        while written < size:
            batch = rnd.choices(pool, k=4096)
            expected = len(batch) * ERROR_RATE  # < 1: inject one line with that probability
            if rnd.random() < expected:
                batch[rnd.randrange(len(batch))] = rnd.choice(errors)
                injected += 1
            block = b"".join(batch)
            out.write(block)
            written += len(block)
    return injected


def run_scan(log: Path, engine: str) -> tuple[dict[str, object], float]:
    argv = [sys.executable, "-m", "trainguard.cli.main", "scan", "--stats", "--engine", engine, str(log)]
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"trainguard scan failed ({result.returncode}): {result.stderr.strip()}")
    return json.loads(result.stdout), elapsed


def run_ripgrep(rg: str, log: Path, workdir: Path) -> tuple[int, float]:
    export = subprocess.run(
        [sys.executable, "-m", "trainguard.cli.main", "patterns", "export", "--format", "lines"],
        capture_output=True,
        text=True,
        check=True,
    )
    with tempfile.NamedTemporaryFile("w", suffix=".patterns", dir=workdir, delete=False) as handle:
        handle.write(export.stdout)
        patterns = Path(handle.name)
    try:
        started = time.perf_counter()
        result = subprocess.run([rg, "-c", "-f", str(patterns), str(log)], capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - started
    finally:
        patterns.unlink()
    if result.returncode not in (0, 1):  # 1 = no match
        raise RuntimeError(f"rg failed ({result.returncode}): {result.stderr.strip()}")
    return int(result.stdout.strip() or 0), elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=1 << 30, help="log size, e.g. 1GiB (default), 200MiB")
    parser.add_argument("--workdir", type=Path, default=Path(__file__).parent / "out", help="where the log goes")
    parser.add_argument("--engine", default="auto", help="trainguard scan --engine (default auto)")
    parser.add_argument("--keep", action="store_true", help="keep the generated log (default: delete it)")
    args = parser.parse_args(argv)
    rg = shutil.which("rg")
    if rg is None:
        print("benchmarks/matcher.py: ripgrep (rg) is not installed (apt-get install ripgrep)", file=sys.stderr)
        return 2
    args.workdir.mkdir(parents=True, exist_ok=True)
    log = args.workdir / f"synthetic-{args.size}.log"
    try:
        started = time.perf_counter()
        injected = generate(log, args.size)
        generated = time.perf_counter() - started
        size = log.stat().st_size
        # Warm the page cache once so neither tool pays for the first read.
        with log.open("rb") as handle:
            while handle.read(64 << 20):
                pass
        ours, ours_seconds = run_scan(log, args.engine)
        rg_matched, rg_seconds = run_ripgrep(rg, log, args.workdir)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"benchmarks/matcher.py: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.keep:
            log.unlink(missing_ok=True)
    mb = size / 1e6
    report = {
        "bytes": size,
        "lines": ours["lines"],
        "injected_error_lines": injected,
        "generate_seconds": round(generated, 2),
        "engine": ours["engine"],
        "trainguard_matched_lines": ours["matched_lines"],
        "rg_matched_lines": rg_matched,
        "equal": ours["matched_lines"] == rg_matched,
        "trainguard_seconds": round(ours_seconds, 3),
        "trainguard_scan_seconds": ours["seconds"],
        "rg_seconds": round(rg_seconds, 3),
        "trainguard_mb_per_s": round(mb / ours_seconds, 1),
        "rg_mb_per_s": round(mb / rg_seconds, 1),
        "ratio_ours_over_rg": round(rg_seconds / ours_seconds, 3),
    }
    print(json.dumps(report))
    return 0 if report["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
