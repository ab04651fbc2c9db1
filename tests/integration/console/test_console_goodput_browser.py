"""The goodput page in a real Chromium, against the real API over a real audit store.

The store holds the crafted history of the goodput store tests (a crash requeued by us, a hang
requeued by a person, a slowdown that completed, a hang requeued by us). The page must draw the
time lost by cause as SVG bars whose seconds add up, cause by cause, to the accounting's totals,
list one table row per group, and regroup when the user picks another grouping.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.console import test_console_scale_browser as scale
from tests.integration.store import test_goodput as history
from trainguard.store import audit

pytestmark = [pytest.mark.integration, pytest.mark.browser]


class Served(scale.Served):
    async def _seed(self, store: audit.AuditStore) -> None:
        await history.write_history(store)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    db = tmp_path_factory.mktemp("console-goodput") / "audit.db"
    with Served(f"sqlite+aiosqlite:///{db}") as running:
        yield running


def test_goodput_page_plots_time_lost_by_cause(served: Served, chromium: Any, artifacts_dir: Path) -> None:
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(served.url + "/#/goodput")
        page.locator("#goodput-chart rect[data-cause]").first.wait_for()
        drawn = page.locator("#goodput-chart rect[data-cause]").evaluate_all(
            "rs => rs.map(r => [r.dataset.cause, Number(r.dataset.seconds)])")
        per_cause: dict[str, float] = {}
        for cause, seconds in drawn:
            per_cause[cause] = per_cause.get(cause, 0.0) + seconds
        assert per_cause == {"work_lost": 100 + 200 + 50, "detection": 10 + 90 + 90, "decision": 5 + 1,
                             "action": 5 + 1, "requeue_wait": 60 + 269 + 60}
        groups = page.locator("#goodput-table tbody tr[data-group]").evaluate_all("rs => rs.map(r => r.dataset.group)")
        assert groups == [history.STALL, history.HANG, history.CRASH, history.SLOW]  # most lost first
        page.screenshot(path=str(artifacts_dir / "goodput.png"), full_page=True)

        page.locator("#goodput-by").select_option("category")
        page.locator("#goodput-table tbody tr[data-group=progress_stalled]").wait_for()
        groups = page.locator("#goodput-table tbody tr[data-group]").evaluate_all("rs => rs.map(r => r.dataset.group)")
        assert groups == ["progress_stalled", "gpu_xid_hardware"]
        assert not errors, errors
    finally:
        context.close()
