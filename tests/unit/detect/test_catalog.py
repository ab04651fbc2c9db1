"""The built-in catalog: every example matches its own pattern, no counter-example matches, on
every engine; coverage of the category vocabulary and of NVIDIA's Xid table; bad operator files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainguard.detect import catalog as catalogs
from trainguard.detect import matcher as matchers
from trainguard.model import vocab

CATALOG = catalogs.load_builtin()
ENGINES = matchers.available_engines()
SERIOUS = {vocab.Severity.FATAL, vocab.Severity.ERROR}
NOT_LOG_SIGNATURES = {vocab.Category.THROUGHPUT_DROP, vocab.Category.PROGRESS_STALLED, vocab.Category.NONE}
XID_CODES = range(1, 173)
"""Every code in NVIDIA's Xid catalogue (analyzing-xid-catalog, 2025 edition)."""


@pytest.fixture(scope="module", params=ENGINES)
def matcher(request: pytest.FixtureRequest) -> matchers.Matcher:
    return matchers.build_matcher(CATALOG, request.param)


def test_catalog_is_versioned_and_large_enough() -> None:
    assert re.fullmatch(r"\d{4}\.\d+\.\d+", CATALOG.version)
    assert len(CATALOG.patterns) >= 100


@pytest.mark.parametrize("spec", CATALOG.patterns, ids=lambda s: s.id)
def test_every_entry_has_examples_and_counter_examples(spec: catalogs.specs.PatternSpec) -> None:
    assert spec.examples, spec.id
    assert spec.counter_examples, spec.id
    assert spec.description and spec.recommended_action, spec.id


@pytest.mark.parametrize("spec", CATALOG.patterns, ids=lambda s: s.id)
def test_regex_is_in_the_agreement_subset(spec: catalogs.specs.PatternSpec) -> None:
    assert catalogs.agreement_problems(spec.regex) == []


def test_examples_match_their_own_pattern(matcher: matchers.Matcher) -> None:
    misses = [(s.id, line) for s in CATALOG.patterns for line in s.examples if s.id not in matcher.match(line)]
    assert misses == []


def test_counter_examples_match_neither_their_pattern_nor_any_serious_one(matcher: matchers.Matcher) -> None:
    hits = []
    for spec in CATALOG.patterns:
        for line in spec.counter_examples:
            matched = matcher.match(line)
            serious = [i for i in matched if CATALOG.by_id[i].severity in SERIOUS]
            if spec.id in matched or serious:
                hits.append((spec.id, line, matched))
    assert hits == []


def test_every_log_category_has_a_pattern() -> None:
    covered = {spec.category for spec in CATALOG.patterns}
    assert set(vocab.Category) - NOT_LOG_SIGNATURES - covered == set()


def test_extractors_find_their_fields_in_examples(matcher: matchers.Matcher) -> None:
    line = "node12:83012:83377 [3] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with status=12 opcode=0"
    assert matcher.extract("nccl.net_ib_completion_error", line) == {"host": "node12", "gpu": "3", "pid": "83012"}
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1923, name=python, GPU has fallen off the bus."
    assert matcher.extract("xid.79_fallen_off_bus", xid) == {"xid": "79", "pci": "0000:3b:00", "pid": "1923"}
    rank = "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: x"
    assert matcher.extract("nccl.watchdog_timeout", rank) == {"rank": "3"}


@pytest.mark.parametrize("code", XID_CODES)
def test_every_catalogued_xid_has_one_entry_with_its_recommended_action(code: int) -> None:
    m = matchers.build_matcher(CATALOG, "python")
    line = f"[Tue Mar 12 04:11:52 2024] NVRM: Xid (PCI:0000:3b:00): {code}, pid=48213, name=python3, event"
    numbered = [i for i in m.match(line) if i.startswith("xid.") and i != "xid.any"]
    assert len(numbered) == 1, numbered
    action = CATALOG.by_id[numbered[0]].recommended_action
    assert re.search(rf"\bXid {code} \([^)]*\): [A-Z_]", action) or f"Xid {code} (" in action


def test_xid_entries_have_recommended_actions() -> None:
    xids = [s for s in CATALOG.patterns if s.id.startswith("xid.")]
    assert xids and all(s.recommended_action for s in xids)


def test_application_xids_are_attributed_to_the_application() -> None:
    m = matchers.build_matcher(CATALOG, "python")
    for code in (13, 31, 43):
        ids = m.match(f"NVRM: Xid (PCI:0000:3b:00): {code}, pid=1, name=python, x")
        assert CATALOG.by_id[ids[0]].attribution_hint == vocab.Attribution.APPLICATION
    for code in (48, 64, 74, 79, 95, 119, 120):
        ids = m.match(f"NVRM: Xid (PCI:0000:3b:00): {code}, pid=1, name=python, x")
        assert CATALOG.by_id[ids[0]].attribution_hint == vocab.Attribution.HARDWARE


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "ops.yaml"
    path.write_text(body, encoding="utf-8")
    return path


ENTRY = """
  - id: ops.{id}
    category: {category}
    attribution_hint: system
    severity: error
    regex: '{regex}'
"""


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"regex": "foo(bar"}, "does not compile"),
        ({"regex": "foo(?=bar)"}, "look-ahead"),
        ({"regex": "(a)\\1"}, "back-references"),
        ({"category": "disk_on_fire"}, "category"),
        ({"regex": "(?:ab)*"}, "empty string"),
    ],
)
def test_bad_operator_file_is_rejected_with_a_clear_error(tmp_path: Path, fields: dict[str, str], message: str) -> None:
    values = {"id": "bad", "category": "filesystem_io", "regex": "disk full", **fields}
    path = _write(tmp_path, "patterns:" + ENTRY.format(**values))
    with pytest.raises(catalogs.CatalogError, match=message) as info:
        catalogs.load_catalog(extra_files=[path])
    assert str(path) in str(info.value)


def test_duplicate_ids_in_an_operator_file_are_rejected(tmp_path: Path) -> None:
    one = ENTRY.format(id="dup", category="filesystem_io", regex="disk full")
    path = _write(tmp_path, "patterns:" + one + one)
    with pytest.raises(catalogs.CatalogError, match="duplicate pattern id"):
        catalogs.load_file(path)


@pytest.mark.parametrize("body", ["not: [a, list", "42", "\xff\xfe"])
def test_unparseable_operator_file_is_a_catalog_error(tmp_path: Path, body: str) -> None:
    path = tmp_path / "ops.yaml"
    path.write_bytes(body.encode("latin-1"))
    with pytest.raises(catalogs.CatalogError):
        catalogs.load_file(path)


def test_operator_patterns_extend_and_override(tmp_path: Path) -> None:
    path = _write(tmp_path, "patterns:" + ENTRY.format(id="gpfs", category="filesystem_io", regex="mmfsd: Unmounted"))
    extended = catalogs.load_catalog(extra_files=[path])
    assert extended.patterns[-1].id == "ops.gpfs"
    assert extended.version.endswith("+local")
    m = matchers.build_matcher(extended, "python")
    assert m.match("mmfsd: Unmounted filesystem gpfs01") == ["ops.gpfs"]


def test_agreement_problems_flag_non_portable_constructs() -> None:
    assert catalogs.agreement_problems(r"disk [0-9]+ failed") == []
    assert catalogs.agreement_problems(r"disk.*failed")
    assert catalogs.agreement_problems(r"\d+ failed")
    assert catalogs.agreement_problems(r"[^ ]+ failed")
    assert catalogs.agreement_problems(r"(?i)failed")
    assert catalogs.agreement_problems(r"failed: [ -~]*")
