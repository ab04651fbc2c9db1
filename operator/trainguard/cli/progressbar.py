"""A one-line progress bar on a terminal, for offline commands that read large files.

``trainguard detect`` on a multi-GB log takes a while; a person at a terminal wants to see that
it moves and how far it is. The bar is drawn only when the caller found stderr to be a terminal
(scripts and pipes get no control characters), is redrawn at most every ``INTERVAL_S`` seconds
(drawing costs nothing next to reading), and is erased when done so that the verdict lines stay
clean.
"""

from __future__ import annotations

import time
from typing import TextIO

INTERVAL_S = 0.2
"""Shortest time between two redraws."""
WIDTH = 24
"""Characters of the bar itself."""
MB = 1_000_000


def render(label: str, done: int, total: int | None, elapsed: float) -> str:
    """The bar's text: ``label [#####     ]  45%  135/300 MB  52.1 MB/s`` (no bar without a total)."""
    rate = done / MB / elapsed if elapsed > 0 else 0.0
    if total:
        share = min(done / total, 1.0)
        filled = int(share * WIDTH)
        return (
            f"{label} [{'#' * filled}{' ' * (WIDTH - filled)}] {share * 100:3.0f}%  "
            f"{done / MB:.0f}/{total / MB:.0f} MB  {rate:.1f} MB/s"
        )
    return f"{label} {done / MB:.0f} MB  {rate:.1f} MB/s"


class ProgressBar:
    """Redraws ``render`` in place on ``out`` (a terminal) as ``update`` reports bytes read."""

    def __init__(self, out: TextIO, label: str, total: int | None) -> None:
        self._out = out
        self._label = label
        self._total = total
        self._started = time.monotonic()
        self._last_draw = 0.0
        self._width = 0

    def update(self, done: int) -> None:
        now = time.monotonic()
        if now - self._last_draw < INTERVAL_S and (self._total is None or done < self._total):
            return
        self._last_draw = now
        text = render(self._label, done, self._total, now - self._started)
        self._out.write("\r" + text.ljust(self._width))
        self._width = max(self._width, len(text))
        self._out.flush()

    def close(self) -> None:
        """Erase the bar (if one was drawn) so that what follows starts on a clean line."""
        if self._width:
            self._out.write("\r" + " " * self._width + "\r")
            self._out.flush()
