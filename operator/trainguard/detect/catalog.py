"""Loads the versioned pattern catalog (package data) plus operator-supplied patterns.

Neighbours: ``model.patterns`` (the schema), ``detect.matcher`` (compiles a catalog).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainguard.model import patterns as specs
from trainguard.model import yamlload

_UNICODE_ESCAPES = frozenset("wWdDsSbB")


class CatalogError(ValueError):
    """The catalog (or an operator's pattern file) is malformed; the message says where."""


@dataclass(frozen=True)
class Catalog:
    """An ordered, id-unique set of patterns. Order is the matcher's index order."""

    version: str
    patterns: tuple[specs.PatternSpec, ...]
    by_id: dict[str, specs.PatternSpec] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        self.by_id.clear()
        for spec in self.patterns:
            if spec.id in self.by_id:
                raise CatalogError(f"duplicate pattern id {spec.id!r}")
            self.by_id[spec.id] = spec

    def extended(self, extra: Iterable[specs.PatternSpec], version_suffix: str = "+local") -> Catalog:
        """A new catalog with ``extra`` appended; an extra entry with an existing id replaces it."""
        extra = list(extra)
        if not extra:
            return self
        replaced = {spec.id for spec in extra}
        kept = tuple(spec for spec in self.patterns if spec.id not in replaced)
        return Catalog(version=self.version + version_suffix, patterns=kept + tuple(extra))


def _parse(document: Any, origin: str) -> tuple[str, list[specs.PatternSpec]]:
    if isinstance(document, list):
        version, entries = "", document
    elif isinstance(document, dict) and isinstance(document.get("patterns"), list):
        version, entries = str(document.get("version", "")), document["patterns"]
    else:
        raise CatalogError(f"{origin}: expected a list of patterns or a mapping with 'patterns:'")
    parsed: list[specs.PatternSpec] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        ident = entry.get("id", f"#{index}") if isinstance(entry, dict) else f"#{index}"
        try:
            spec = specs.PatternSpec.model_validate(entry)
        except ValidationError as exc:
            raise CatalogError(f"{origin}: pattern {ident}: {_one_line(exc)}") from None
        if spec.id in seen:
            raise CatalogError(f"{origin}: duplicate pattern id {spec.id!r}")
        seen.add(spec.id)
        if _matches_empty(spec.regex):
            raise CatalogError(
                f"{origin}: pattern {spec.id}: regex {spec.regex!r} matches the empty string "
                "(it would match every line)"
            )
        parsed.append(spec)
    return version, parsed


def _one_line(exc: ValidationError) -> str:
    """Every problem as ``field.path: message``, on one line (the CLI prints it as one line)."""
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        problems.append(f"{where}: {error['msg']}" if where else str(error["msg"]))
    return "; ".join(problems)


def _matches_empty(regex: str) -> bool:
    flags = re.IGNORECASE if regex.startswith("(?i)") else 0
    return re.compile(regex.removeprefix("(?i)"), flags).search("") is not None


def agreement_problems(regex: str) -> list[str]:
    """Constructs in ``regex`` on which Python re, RE2, Hyperscan and ripgrep may disagree.

    ``PatternSpec.check_portable`` guarantees every engine *accepts* a regex; this goes
    further, for ``scan_file`` to give ripgrep's exact counts on arbitrary bytes. Hyperscan
    and our chunk scan work on bytes, ripgrep and Python on Unicode text, so ``.``, the
    ``\\w \\d \\s \\b`` families, negated classes, case folding and non-ASCII literals can
    differ on invalid UTF-8 or non-ASCII text, and a negated class can run across a newline
    in a multi-line chunk. The built-in catalog has none of these; operator patterns get
    a warning (``trainguard patterns test``), not a refusal.
    """
    problems: list[str] = []
    if regex.startswith("(?i)"):
        problems.append("(?i) case folding differs between byte and Unicode engines")
    if not regex.isascii():
        problems.append("non-ASCII characters are matched as bytes by Hyperscan")
    in_class = False
    index = 0
    while index < len(regex):
        char = regex[index]
        if char == "\\" and index + 1 < len(regex):
            if regex[index + 1] in _UNICODE_ESCAPES:
                problems.append(f"\\{regex[index + 1]} is Unicode-aware in ripgrep/Python, ASCII in Hyperscan/RE2")
            index += 2
            continue
        if in_class:
            if char == "]":
                in_class = False
        elif char == "[":
            in_class = True
            if regex.startswith("[^", index):
                problems.append("a negated class [^...] also matches newlines and invalid UTF-8 bytes")
            if regex.startswith("]", index + 1) or regex.startswith("^]", index + 1):
                index += 2 if regex[index + 1] == "]" else 3
                continue
        elif char == ".":
            problems.append("'.' matches one byte in Hyperscan but one valid character in ripgrep")
        index += 1
    body = regex.rstrip(")")
    if body.endswith(("]*", "]+", "]{0,}", "]{1,}", ".*", ".+")):
        gap = body[body.rfind("[") :] if body[-2:] not in (".*", ".+") else "."
        if gap == "." or " " in gap or "-~" in gap:
            problems.append("a trailing line-wide repeat reports a match per byte; end on a literal")
    return sorted(set(problems))


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when PyYAML was built with it: it reads the built-in catalog about ten
times faster than the pure-Python one (a tenth of a second of every `trainguard scan`), with the
same result (a test compares them)."""


def load_builtin() -> Catalog:
    """The catalog shipped in the package."""
    text = resources.files("trainguard.catalog").joinpath("patterns.yaml").read_text(encoding="utf-8")
    version, parsed = _parse(yaml.load(text, Loader=_SAFE_LOADER), "builtin catalog")
    return Catalog(version=version, patterns=tuple(parsed))


def load_file(path: Path) -> list[specs.PatternSpec]:
    """Operator patterns from a YAML file (same schema as the built-in catalog)."""
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "is a directory", str(path))
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        document = yamlload.load(text)  # an operator's file: a key given twice is refused
    except yaml.YAMLError as exc:
        # PyYAML's message spans several lines (context, the offending line, a caret); keep it to one.
        raise CatalogError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
    return _parse(document, str(path))[1]


def load_catalog(extra_files: Sequence[Path] = (), extra_specs: Sequence[specs.PatternSpec] = ()) -> Catalog:
    """The built-in catalog extended by operator files and inline specs (e.g. from a policy)."""
    extra: list[specs.PatternSpec] = []
    for path in extra_files:
        extra.extend(load_file(path))
    extra.extend(extra_specs)
    return load_builtin().extended(extra)
