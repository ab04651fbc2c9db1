"""Benchmark: detection latency through VictoriaLogs (line written -> anomaly), and the store's own delay.

One real VictoriaLogs server (built by ``hack/local-victorialogs.sh``, started on a free port), the
test shipper (``tests/support/log_shipper.py``: polls the file every 0.1 s, pushes JSON lines) and
the product's ``signals.victorialogs.VictoriaLogsBook`` read every 0.25 s (the engine's tail
interval) into the product's ``detect.stream.WorkloadDetector`` (catalog matcher, default
detection settings: the crash window settles 1 s after the first error, as in the engine).

``--probes`` times (default 20), a fresh detector per probe: a few healthy training lines, then
one crash line (``RuntimeError: CUDA error: an illegal memory access was encountered``, unique
per probe) is appended to the job's output file. Measured, in the same run, per probe:

- ``detect_s``: crash line written -> the detector's anomaly (tail/sweep, read cadence, the
  detector's 1 s settle window included);
- ``store_delay_s``: crash line written -> the line is returned by ``/select/logsql/query``
  (polled every 50 ms): the shipper's poll plus the store's own ingest-to-query delay;
- ``beyond_store_s``: ``detect_s - store_delay_s`` (the issue's goal: p50 <= 2 s).

Prints one JSON object with p50/p95 of each. Exit 0 when every probe was detected, 1 otherwise.

    .venv/bin/python benchmarks/log_store_latency.py [--probes 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.support import victorialogs as server_mod  # noqa: E402  (the repository root must be importable first)
from tests.support.log_shipper import Shipper  # noqa: E402
from trainguard.detect import catalog as catalog_mod  # noqa: E402
from trainguard.detect import matcher as matcher_mod  # noqa: E402
from trainguard.detect import stream  # noqa: E402
from trainguard.model import clock  # noqa: E402
from trainguard.signals import victorialogs  # noqa: E402

READ_EVERY_S = 0.25
TIMEOUT_S = 60.0


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 3)


async def queryable(session: aiohttp.ClientSession, url: str, text: str) -> float:
    """Poll ``/select/logsql/query`` until ``text`` is found; returns the time it was."""
    deadline = time.time() + TIMEOUT_S
    while time.time() < deadline:
        async with session.post(f"{url}/select/logsql/query",
                                data={"query": f"_msg:={victorialogs.quote(text)} | limit 1"}) as resp:
            if resp.status == 200 and (await resp.text()).strip():
                return time.time()
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{text!r} not queryable after {TIMEOUT_S} s")


async def detected(book: victorialogs.VictoriaLogsBook, detector: stream.WorkloadDetector, marker: str) -> float:
    """Read the book every ``READ_EVERY_S`` into ``detector`` until a crash anomaly naming ``marker``."""
    deadline = time.time() + TIMEOUT_S
    while time.time() < deadline:
        found = []
        for f, lines in await book.read():
            for line in lines:
                book.consume(f, line)
                found += detector.feed(line)
        found += detector.tick()
        if any(marker in e.text for a in found for e in a.evidence):
            return time.time()
        await asyncio.sleep(READ_EVERY_S)
    raise TimeoutError(f"no anomaly for {marker!r} after {TIMEOUT_S} s")


async def main(probes: int) -> int:
    exe = server_mod.binary()
    with tempfile.TemporaryDirectory(prefix="tg-vlogs-bench-") as tmp:
        server = server_mod.VictoriaLogsServer(exe, Path(tmp) / "data")
        server.start()
        out = Path(tmp) / "slurm-4242.out"
        out.write_text("")
        client = victorialogs.Client(victorialogs.Config(url=server.url))
        book = victorialogs.VictoriaLogsBook("bench", "4242", clock.SystemClock(), client)
        book.add(str(out), "stdout")
        matcher = matcher_mod.build_matcher(catalog_mod.load_catalog())
        detect_s: list[float] = []
        store_s: list[float] = []
        beyond: list[float] = []
        missed = 0
        try:
            async with Shipper(server.url, lambda: [(str(out), {"job_id": "4242"})]), aiohttp.ClientSession() as s:
                for i in range(probes):
                    detector = stream.WorkloadDetector(matcher, stream.DetectionSettings(), clock.SystemClock(),
                                                       workload="bench", attempt=i)
                    for _f, lines in await book.read():  # earlier probes' lines are not this detector's
                        for line in lines:
                            book.consume(_f, line)
                    marker = f"probe-{i}-{time.time_ns()}"
                    with out.open("a") as fh:
                        fh.write(f"0: [rank0]: step {i} loss 1.0 ({marker} healthy)\n")
                        fh.flush()
                        written = time.time()
                        fh.write(f"1: [rank1]: RuntimeError: CUDA error: an illegal memory access was encountered "
                                 f"({marker})\n")
                        fh.flush()
                    crash = (f"1: [rank1]: RuntimeError: CUDA error: an illegal memory access was encountered "
                             f"({marker})")
                    try:
                        at_store, at_anomaly = await asyncio.gather(queryable(s, server.url, crash),
                                                                    detected(book, detector, marker))
                    except TimeoutError:
                        missed += 1
                        continue
                    detect_s.append(at_anomaly - written)
                    store_s.append(at_store - written)
                    beyond.append(at_anomaly - at_store)
        finally:
            book.close()
            await book.wait_closed()
            await client.close()
            server.stop()
    result = {
        "probes": probes, "missed": missed, "read_every_s": READ_EVERY_S,
        "settle_s": stream.DetectionSettings().settle_s,
        "detect_p50_s": pct(detect_s, 0.5), "detect_p95_s": pct(detect_s, 0.95),
        "store_delay_p50_s": pct(store_s, 0.5), "store_delay_p95_s": pct(store_s, 0.95),
        "beyond_store_p50_s": pct(beyond, 0.5), "beyond_store_p95_s": pct(beyond, 0.95),
        "detect_mean_s": round(statistics.fmean(detect_s), 3) if detect_s else None,
    }
    print(json.dumps(result))
    return 0 if missed == 0 else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=20)
    sys.exit(asyncio.run(main(parser.parse_args().probes)))
