"""Loads the versioned pattern catalog (package data) plus operator-supplied patterns.

Neighbours: ``model.patterns`` (the schema), ``detect.matcher`` (compiles a catalog).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainguard.model import patterns as specs


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
    for index, entry in enumerate(entries):
        try:
            parsed.append(specs.PatternSpec.model_validate(entry))
        except ValidationError as exc:
            ident = entry.get("id", f"#{index}") if isinstance(entry, dict) else f"#{index}"
            raise CatalogError(f"{origin}: pattern {ident}: {exc}") from exc
    return version, parsed


def load_builtin() -> Catalog:
    """The catalog shipped in the package."""
    text = resources.files("trainguard.catalog").joinpath("patterns.yaml").read_text(encoding="utf-8")
    version, parsed = _parse(yaml.safe_load(text), "builtin catalog")
    return Catalog(version=version, patterns=tuple(parsed))


def load_file(path: Path) -> list[specs.PatternSpec]:
    """Operator patterns from a YAML file (same schema as the built-in catalog)."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogError(f"{path}: {exc}") from exc
    return _parse(document, str(path))[1]


def load_catalog(
    extra_files: Sequence[Path] = (), extra_specs: Sequence[specs.PatternSpec] = ()
) -> Catalog:
    """The built-in catalog extended by operator files and inline specs (e.g. from a policy)."""
    extra: list[specs.PatternSpec] = []
    for path in extra_files:
        extra.extend(load_file(path))
    extra.extend(extra_specs)
    return load_builtin().extended(extra)
