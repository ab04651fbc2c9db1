"""The matcher: identical answers on every engine, on catalog lines and on junk; file scans."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from trainguard.detect import catalog as catalogs
from trainguard.detect import matcher as matchers
from trainguard.detect import sanitize

CATALOG = catalogs.load_builtin()
ENGINES = matchers.available_engines()


def _junk_lines() -> list[str]:
    rnd = random.Random(7)
    catalog_lines = [line for spec in CATALOG.patterns for line in (*spec.examples, *spec.counter_examples)]
    raw: list[bytes] = [bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 300))) for _ in range(300)]
    raw += [b"\x1b[31m" + line.encode() + b"\x1b[0m" for line in catalog_lines[::7]]
    raw += [b" 12%|#  |\r" + line.encode() + b"\r" for line in catalog_lines[::11]]
    raw += [line.encode().replace(b" ", b"\x00 ", 2) for line in catalog_lines[::5]]
    raw += [line.encode()[: len(line) // 2] + b"\xff\xfe" + line.encode()[len(line) // 2 :] for line in catalog_lines]
    raw += ["é Segmentation fault ü".encode(), "🙂 MemoryError".encode(), b"Killed\r", b"KILLED", b""]
    raw.append(b"Watchdog caught collective operation timeout" + b" \xff" * 5_000_000)  # a 10 MB line
    return [*catalog_lines, *(sanitize.clean_line(line) for line in raw)]


JUNK = _junk_lines()


def test_auto_picks_the_fastest_available_engine() -> None:
    assert matchers.build_matcher(CATALOG).engine == ENGINES[0]


def test_unknown_engine_is_a_clear_error() -> None:
    with pytest.raises(matchers.MatcherError, match="unknown engine"):
        matchers.build_matcher(CATALOG, "grep")


def test_all_engines_agree_on_catalog_lines_and_junk() -> None:
    built = [matchers.build_matcher(CATALOG, engine) for engine in ENGINES]
    reference, others = built[-1], built[:-1]  # python is always last
    disagreements = [
        (other.engine, line[:120]) for line in JUNK for other in others if other.match(line) != reference.match(line)
    ]
    assert disagreements == []
    assert reference.match(JUNK[-1]) == ["nccl.watchdog_timeout"]


@pytest.mark.parametrize("engine", ENGINES)
def test_match_returns_catalog_order(engine: str) -> None:
    m = matchers.build_matcher(CATALOG, engine)
    line = "[rank6]: RuntimeError: CUDA error: an illegal memory access was encountered"
    ids = m.match(line)
    order = [spec.id for spec in CATALOG.patterns]
    assert ids == sorted(ids, key=order.index)
    assert ids[0] == "cuda.illegal_memory_access" and "python.exception_line" in ids


@pytest.mark.parametrize("engine", ENGINES)
def test_extract_returns_only_found_fields(engine: str) -> None:
    m = matchers.build_matcher(CATALOG, engine)
    assert m.extract("nccl.watchdog_timeout", "Watchdog caught collective operation timeout") == {}
    with pytest.raises(KeyError):
        m.extract("no.such_pattern", "x")


def _write_corpus(path: Path) -> tuple[int, int]:
    """A file of catalog lines and noise; returns (lines, lines that match some pattern)."""
    python = matchers.build_matcher(CATALOG, "python")
    rnd = random.Random(3)
    noise = [f"iteration {i} | loss {rnd.random():.4f} | lr 3e-4 | tokens/s 41234" for i in range(2000)]
    catalog_lines = [line for spec in CATALOG.patterns for line in (*spec.examples, *spec.counter_examples)]
    lines = noise + catalog_lines
    rnd.shuffle(lines)
    path.write_text("\n".join(lines), encoding="utf-8")  # no newline at the end, on purpose
    return len(lines), sum(1 for line in lines if python.match(line))


@pytest.mark.parametrize("engine", ENGINES)
def test_scan_file_counts_lines_and_matches(tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "train.log"
    lines, matched = _write_corpus(path)
    monkeypatch.setattr(matchers, "CHUNK_BYTES", 4096)  # many chunks, cut inside lines
    stats = matchers.build_matcher(CATALOG, engine).scan_file(path)
    assert (stats.lines, stats.matched_lines) == (lines, matched)
    assert stats.patterns["python.exception_line"] >= 1
    assert stats.seconds >= 0


@pytest.mark.parametrize("engine", ENGINES)
def test_scan_file_of_an_empty_file(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    stats = matchers.build_matcher(CATALOG, engine).scan_file(path)
    assert (stats.lines, stats.matched_lines, stats.patterns) == (0, 0, {})
