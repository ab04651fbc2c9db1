"""What the block-scan equivalence tests share: ``analyze`` (block scan, fast paths) against the
line-by-line reference ``analyze_by_line`` on the same bytes, compared by everything a user
sees (the ``hyperscan`` matcher fixture is in this folder's conftest)."""

from __future__ import annotations

import io

from trainguard.detect import matcher, static, stream


def outcome(result: static.Result) -> tuple[object, ...]:
    return (
        result.to_json(max_evidence=10**9),
        [item.model_dump() for item in result.evidence],
        [item.model_dump() for item in result.context],
        result.lines,
        result.summary,
    )


def both(
    compiled: matcher.Matcher, data: bytes, block_bytes: int = static.BLOCK_BYTES, progress_regex: str | None = None
) -> tuple[object, object]:
    """(``analyze``'s outcome, ``analyze_by_line``'s) for ``data``."""
    settings = stream.DetectionSettings(progress_regex=progress_regex)
    fast = static.FileAnalyzer(compiled, settings, block_bytes=block_bytes).analyze("x.log", io.BytesIO(data))
    slow = static.FileAnalyzer(compiled, settings).analyze_by_line("x.log", io.BytesIO(data))
    return outcome(fast), outcome(slow)
