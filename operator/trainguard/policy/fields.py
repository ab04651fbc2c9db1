"""The building blocks every RecoveryPolicy section is made of: the section base and the duration type.

Place: shared by ``policy.model`` (the schema) and the sections kept in their own modules
(``policy.validation``), so a section in another module validates, serialises and generates its CRD
schema exactly like one in ``model``. No I/O.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer, WithJsonSchema
from pydantic.alias_generators import to_camel

from trainguard.policy import durations

Duration = Annotated[
    float,
    BeforeValidator(durations.parse),
    PlainSerializer(durations.format_seconds, return_type=str),
    WithJsonSchema({"type": "string", "pattern": durations.PATTERN}),
]
"""A duration string in files and CRDs, float seconds in Python."""


def duration_default(text: str) -> Any:
    """A duration default, kept as text so the schema shows ``30m``; checked at import (typed Any
    because pydantic validates it into float seconds)."""
    durations.parse(text)
    return text


class Section(BaseModel):
    """Base of every spec section: camelCase in YAML and CRDs, unknown keys refused, frozen."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, validate_default=True
    )
