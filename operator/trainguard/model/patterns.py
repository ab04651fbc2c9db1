"""The schema of one failure signature in the pattern catalog.

The catalog itself is data (``trainguard/catalog/patterns.yaml``), loaded by
``trainguard.detect.catalog``; operators add entries from a file or a RecoveryPolicy
(``detection.extraPatterns``), which is why the schema lives here, below both stages.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trainguard.model import vocab

_FORBIDDEN = (
    ("(?=", "look-ahead"),
    ("(?!", "negative look-ahead"),
    ("(?<=", "look-behind"),
    ("(?<!", "negative look-behind"),
    ("(?#", "comment group"),
)
_BACKREF = re.compile(r"(?<!\\)\\[1-9]")
_EXTRACT_FIELDS = frozenset({"host", "rank", "gpu", "xid", "pci", "pid", "exit_code", "signal"})


def check_portable(regex: str) -> None:
    """Raise ValueError unless ``regex`` is in the subset Python re, RE2, Hyperscan and ripgrep share.

    No look-around, no back-references, no inline flag groups other than a leading ``(?i)``,
    no named groups (ripgrep and Hyperscan differ on them). Matching is line by line, so
    ``^`` and ``$`` anchor to the line.
    """
    for token, name in _FORBIDDEN:
        if token in regex:
            raise ValueError(f"{name} {token!r} is not portable")
    if _BACKREF.search(regex):
        raise ValueError("back-references are not portable")
    if "(?P<" in regex or "(?<" in regex:
        raise ValueError("named groups are not portable; put extraction in 'extract'")
    body = regex[4:] if regex.startswith("(?i)") else regex
    if "(?" in body.replace("(?:", ""):
        raise ValueError("inline flags are only allowed as a leading (?i)")
    try:
        re.compile(regex)
    except re.error as exc:
        raise ValueError(f"does not compile: {exc}") from exc


class PatternSpec(BaseModel):
    """One failure signature: how to recognise it, what it means, and proof that it works."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)+$", description="Stable dotted id, e.g. nccl.watchdog_timeout.")
    category: vocab.Category
    attribution_hint: vocab.Attribution = Field(description="Default attribution when this is the first cause.")
    severity: vocab.Severity
    regex: str = Field(min_length=3, description="Portable regex matched against one log line.")
    description: str = ""
    recommended_action: str = Field(default="", description="What the vendor recommends, e.g. for an Xid.")
    extract: dict[str, str] = Field(
        default_factory=dict,
        description="Field name (host, rank, gpu, xid, pci, pid, exit_code, signal) -> Python regex with "
        "exactly one capture group, applied only to lines the main regex matched.",
    )
    examples: list[str] = Field(default_factory=list)
    counter_examples: list[str] = Field(default_factory=list)

    @field_validator("regex")
    @classmethod
    def _portable(cls, value: str) -> str:
        check_portable(value)
        return value

    @field_validator("extract")
    @classmethod
    def _extractors(cls, value: dict[str, str]) -> dict[str, str]:
        for name, rx in value.items():
            if name not in _EXTRACT_FIELDS:
                raise ValueError(f"unknown extract field {name!r}; known: {sorted(_EXTRACT_FIELDS)}")
            try:
                groups = re.compile(rx).groups
            except re.error as exc:
                raise ValueError(f"extract.{name} does not compile: {exc}") from exc
            if groups != 1:
                raise ValueError(f"extract.{name} needs exactly one capture group, has {groups}")
        return value
