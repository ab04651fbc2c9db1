"""The Hyperscan matcher the block-scan tests of this folder share (skipped where it is missing)."""

from __future__ import annotations

import pytest

from trainguard.detect import catalog, matcher


@pytest.fixture(scope="module")
def hyperscan() -> matcher.Matcher:
    if "hyperscan" not in matcher.available_engines():
        pytest.skip("Hyperscan is not installed")
    return matcher.build_matcher(catalog.load_builtin(), engine="hyperscan")
