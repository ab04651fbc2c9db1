"""Signals: what the detectors consume. Hot-path values, so frozen slotted dataclasses."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of workload output as it arrived.

    ``text`` is already decoded (invalid UTF-8 replaced) and stripped of the line ending;
    ``lineno`` counts from 1 within ``source`` for this attempt; ``received_at`` is the
    arrival time (epoch seconds, from the injected clock); ``node``/``rank`` are set when
    the source knows them (``srun --label`` prefix, pod name, NCCL ``host:pid:tid``).
    """

    text: str
    lineno: int
    received_at: float
    source: str = ""
    node: str | None = None
    rank: int | None = None


@dataclass(frozen=True, slots=True)
class MetricSample:
    """One metric value, e.g. a DCGM Xid counter or a throughput gauge."""

    name: str
    value: float
    at: float
    node: str | None = None
    gpu: int | None = None
    labels: tuple[tuple[str, str], ...] = ()
