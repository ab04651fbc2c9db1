"""Anomaly: the output of the detectors, the input of attribution."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from trainguard.model import vocab


class Evidence(BaseModel):
    """One log line (or sample) that supports an anomaly.

    ``line`` is the 1-based line number in its source, ``pattern`` the catalog id that
    matched (or a detector name such as ``hang.progress_silence``).
    """

    model_config = ConfigDict(frozen=True)

    line: int
    text: str
    pattern: str
    source: str = ""
    at: float | None = None
    node: str | None = None
    rank: int | None = None
    gpu: int | None = None
    xid: int | None = None
    category: vocab.Category = vocab.Category.NONE
    severity: vocab.Severity = vocab.Severity.ERROR


class Anomaly(BaseModel):
    """Something is wrong with one attempt of one workload.

    ``category`` and ``attribution_hint`` are the detectors' first-cause reading of the
    evidence; attribution may overrule them. ``first_seen_at`` is when the initiating
    line was written/received, ``detected_at`` when the detector concluded.
    """

    model_config = ConfigDict(frozen=True)

    symptom: vocab.Symptom
    category: vocab.Category
    attribution_hint: vocab.Attribution = vocab.Attribution.UNKNOWN
    evidence: list[Evidence] = Field(default_factory=list)
    suspect_nodes: list[str] = Field(default_factory=list)
    suspect_ranks: list[int] = Field(default_factory=list)
    first_seen_at: float | None = None
    detected_at: float | None = None
    summary: str = ""
