"""Summaries of a py-spy raw profile (``py-spy record -f raw``) for the benchmarks: where a process's CPU
goes, by the asyncio task's outermost package, by kopf anywhere in the stack, and by own time."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any


def profile_summary(raw: Path) -> dict[str, Any]:
    """py-spy's raw output (``frame;frame;... count``, outermost first) summed by the asyncio task's outermost
    package (the frame after the event loop's ``Handle._run``), by kopf anywhere in the stack, and by own time."""
    origins: collections.Counter[str] = collections.Counter()
    modules: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = kopf = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        if any("kopf/" in f for f in frames):
            kopf += count
        start = max((i for i, f in enumerate(frames) if "asyncio/events.py" in f), default=-1) + 1
        origin = next((f for f in frames[start:]), frames[-1])
        origins[_package(origin)] += count
        leaves[frames[-1].strip()] += count
        modules[_package(frames[-1])] += count
    if not total:
        return {"samples": 0}
    return {"samples": total,
            "by_task_origin": {k: round(v / total, 3) for k, v in origins.most_common(12)},
            "kopf_share": round(kopf / total, 3),
            "own_by_package": {k: round(v / total, 3) for k, v in modules.most_common(12)},
            "top_own": {k[:140]: round(v / total, 3) for k, v in leaves.most_common(12)}}


def _package(frame: str) -> str:
    """``trainguard/<package>[/<module>]`` or the top package of a frame ``func (path:line)`` (py-spy shortens
    paths to the importable part: ``kopf/_core/...``, ``trainguard/k8s/podlogs.py``)."""
    where = frame[frame.rfind("(") + 1:].rstrip(")").rsplit(":", 1)[0]
    if "/site-packages/" in where:
        where = where.split("/site-packages/", 1)[1]
    elif "/lib/python3." in where:
        where = where.split("/lib/python3.", 1)[1].split("/", 1)[-1]
    parts = where.split("/")
    if parts[0] == "trainguard" and len(parts) > 2:
        return "/".join(parts[:3] if parts[1] == "k8s" and len(parts) > 3 else parts[:2]).removesuffix(".py")
    return parts[0].removesuffix(".py")
