"""A real Chromium for the console's browser tests: Debian's ``chromium`` package driven by
Playwright for Python through ``executable_path`` (``playwright install`` downloads browsers and
is never run). ``hack/test.sh`` installs the package as root; when it is missing, or Playwright is
not importable, the tests that need the browser skip and say which of the two is missing.

Screenshots go to ``artifacts_dir``: ``$TG_TEST_ARTIFACTS`` if set, else ``.local/artifacts/`` in the
checkout (git-ignored), one directory per session, printed at the end so a CI log points at it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path(os.environ.get("TG_CHROMIUM", "/usr/lib/chromium/chromium"))
"""The browser binary itself (``/usr/bin/chromium`` is a wrapper script that prints a shell warning)."""
REPO_ROOT = Path(__file__).resolve().parents[2]


def why_no_browser() -> str:
    """Why the browser tests cannot run here (empty: they can)."""
    if not CHROMIUM.is_file() or not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM}: apt-get install -y chromium (hack/test.sh does it as root)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed: pip install -e '.[dev]'"
    return ""


@pytest.fixture(scope="session")
def artifacts_dir() -> Iterator[Path]:
    base = Path(os.environ.get("TG_TEST_ARTIFACTS") or REPO_ROOT / ".local" / "artifacts")
    directory = base / time.strftime("browser-%Y%m%d-%H%M%S")
    directory.mkdir(parents=True, exist_ok=True)
    yield directory
    print(f"\nbrowser test artifacts (screenshots): {directory}")


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A headless Chromium (``playwright.sync_api.Browser``) for one test module."""
    why = why_no_browser()
    if why:
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                             args=["--disable-gpu", "--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield browser
        finally:
            browser.close()
