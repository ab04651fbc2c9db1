"""Every relative link in the README and the docs resolves to a file, and every `#anchor` to a heading.

The README's Status table sends a newcomer to `docs/status.md#<capability>` for the detail behind each
line; a renamed heading would silently turn those links into dead ends. Anchors follow GitHub's rule
(lower case, punctuation dropped, spaces to hyphens, `-1`, `-2` for repeats), the one readers click.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "benchmarks" / "README.md",
               ROOT / "charts" / "trainguard" / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"```.*?```", re.S)


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``path`` (code fences hold no headings)."""
    seen: dict[str, int] = {}
    for line in FENCE.sub("", path.read_text()).splitlines():
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, 0) + 1
        if seen[slug] > 1:
            seen[f"{slug}-{seen[slug] - 1}"] = 1
    return set(seen)


def dead_links(doc: Path) -> list[str]:
    """The relative links of ``doc`` whose file or anchor does not exist."""
    dead = []
    for target in LINK.findall(FENCE.sub("", doc.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            dead.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            dead.append(f"{target}: no such heading in {path.relative_to(ROOT)}")
    return dead


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_in_the_docs_resolves(doc: Path) -> None:
    assert dead_links(doc) == []


def test_every_status_line_of_the_readme_links_to_its_detail() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Status", 1)[1].split("\n## ", 1)[0]
    rows = [row for row in table.splitlines() if row.startswith("| ") and not row.startswith(("| capability", "| ---"))]
    assert len(rows) > 20
    assert all("docs/status.md#" in row for row in rows), [r for r in rows if "docs/status.md#" not in r]
