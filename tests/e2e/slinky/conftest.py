"""The ``scene`` fixture of the Slinky end-to-end tests (``harness``); ``slinky_cluster`` comes from
the root conftest's plugin ``tests.support.slinky``."""

from __future__ import annotations

from tests.e2e.slinky.harness import scene

__all__ = ["scene"]
