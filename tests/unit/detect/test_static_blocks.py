"""``FileAnalyzer.analyze`` (block scan) gives exactly the verdicts of the line-by-line reference.

``analyze`` reads blocks, lets the matcher scan each block in one call and offers a line to the
per-line matcher only when a match ended on it or when the line is not plain printable ASCII.
Whatever the block size, the result (verdict, first cause, every evidence and context line,
line count, summary) must equal ``analyze_by_line``'s, over the labelled corpora and over logs
built to break a block reader: binary junk, a 10 MB line, CRLF, no trailing newline, block
boundaries inside a line and inside a match.
"""

from __future__ import annotations

import io
import random
from importlib import resources
from pathlib import Path

import pytest
import yaml

from tests.unit.detect.equivalence import both
from trainguard.detect import catalog, matcher, static, straggler, stream

DATA = Path(__file__).resolve().parents[2] / "data"
CORPORA = sorted([*(DATA / "real").glob("*.log"), *(DATA / "eval").glob("*.log")])


def test_the_corpora_are_there() -> None:
    assert len(CORPORA) > 300


@pytest.mark.parametrize("path", CORPORA, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_labelled_logs_give_the_same_verdict(hyperscan: matcher.Matcher, path: Path) -> None:
    fast, slow = both(hyperscan, path.read_bytes())
    assert fast == slow


@pytest.mark.parametrize("block_bytes", [1, 7, 61, 4096])
def test_block_boundaries_inside_lines_and_matches(hyperscan: matcher.Matcher, block_bytes: int) -> None:
    # A failing run's log, cut every few bytes: boundaries fall inside prefixes, evidence lines
    # and the matched words themselves.
    data = b"".join(sorted(CORPORA)[i].read_bytes() for i in range(0, len(CORPORA), 40))
    fast, slow = both(hyperscan, data, block_bytes)
    assert fast == slow


def _megatron(rnd: random.Random, lines: int) -> list[bytes]:
    out = []
    for i in range(lines):
        ms = 1000.0 if i < lines // 2 or i % 8 else 4000.0
        out.append(
            f"{i % 8}: [2026-11-29 12:{i // 60 % 60:02d}:{i % 60:02d},000] iteration {i:8d}/ 500000 | "
            f"elapsed time per iteration (ms): {ms + rnd.uniform(-5, 5):.1f} | tokens per second: 40000".encode()
        )
    return out


def _junk_log() -> bytes:
    rnd = random.Random(7)
    lines = _megatron(rnd, 400)
    errors = [line.encode() for spec in catalog.load_builtin().patterns for line in spec.examples]
    odd = [
        bytes(rnd.randrange(256) for _ in range(300)),  # binary junk, NULs and invalid UTF-8 included
        b"\x1b[31m" + errors[3] + b"\x1b[0m",  # colour escapes around an error
        b"Loading: 10%|#  | 1/10\r 50%|#####  | 5/10\r" + errors[5],  # a tqdm bar, then an error
        "rank 3: caf\u00e9 \u212a ".encode() + errors[8],  # non-ASCII text before an error
        errors[11] + b"\r",  # CRLF
        b"\r\r",
        b"",
        b"   ",
        b"\x00" * 50,
    ]
    for index, line in enumerate(odd):
        lines.insert(17 + index * 41, line)
    for index, line in enumerate(errors[::7]):
        lines.insert(23 + index * 13, line)
    return b"\n".join(lines)


@pytest.mark.parametrize("block_bytes", [13, 997, static.BLOCK_BYTES])
@pytest.mark.parametrize("ending", [b"", b"\n", b"\r\n"], ids=["no-final-newline", "newline", "crlf"])
def test_junk_escapes_crlf_and_the_last_line(hyperscan: matcher.Matcher, block_bytes: int, ending: bytes) -> None:
    data = _junk_log() + ending
    fast, slow = both(hyperscan, data, block_bytes)
    assert fast == slow


def test_every_line_in_crlf(hyperscan: matcher.Matcher) -> None:
    fast, slow = both(hyperscan, _junk_log().replace(b"\n", b"\r\n"), 4093)
    assert fast == slow


@pytest.mark.parametrize("block_bytes", [65_536, static.BLOCK_BYTES])
@pytest.mark.parametrize("final_newline", [True, False])
def test_a_ten_megabyte_line(hyperscan: matcher.Matcher, block_bytes: int, final_newline: bool) -> None:
    # One 10 MB line between an error and progress lines (cut to head and tail as read_lines
    # cuts it, whether read whole in a block or streamed past); and a 10 MB last line.
    error = catalog.load_builtin().patterns[0].examples[0].encode()
    huge = b"x" * 5_000_000 + b" " + error + b" " + b"y" * 5_000_000
    lines = [b"[rank0]: starting", error, huge, *_megatron(random.Random(1), 50), huge]
    data = b"\n".join(lines) + (b"\n" if final_newline else b"")
    fast, slow = both(hyperscan, data, block_bytes)
    assert fast == slow


@pytest.mark.parametrize("length", [static.MAX_LINE_BYTES - 1, static.MAX_LINE_BYTES, static.MAX_LINE_BYTES + 1])
@pytest.mark.parametrize("final_newline", [True, False])
def test_lines_around_the_cut_length(hyperscan: matcher.Matcher, length: int, final_newline: bool) -> None:
    error = catalog.load_builtin().patterns[2].examples[0].encode()
    data = b"a\n" + error + b"z" * (length - len(error)) + (b"\n" if final_newline else b"")
    for block_bytes in (4096, static.BLOCK_BYTES):
        fast, slow = both(hyperscan, data, block_bytes)
        assert fast == slow


def test_the_per_line_matcher_runs_only_where_the_block_scan_found_a_match(
    hyperscan: matcher.Matcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The point of the block scan: a clean progress line no pattern matches costs no matcher call.
    calls: list[str] = []
    original = hyperscan.match

    def counting(line: str) -> list[str]:
        calls.append(line)
        return original(line)

    monkeypatch.setattr(hyperscan, "match", counting)
    error = catalog.load_builtin().patterns[0].examples[0]
    data = b"\n".join([*_megatron(random.Random(2), 300), error.encode()]) + b"\n"
    result = static.FileAnalyzer(hyperscan, stream.DetectionSettings()).analyze("x.log", io.BytesIO(data))
    assert result.lines == 301
    assert calls == [error]


def test_the_progress_callback_reports_every_byte(hyperscan: matcher.Matcher) -> None:
    data = b"\n".join(_megatron(random.Random(3), 500)) + b"\n"
    seen: list[int] = []
    static.FileAnalyzer(hyperscan, stream.DetectionSettings(), block_bytes=5000).analyze(
        "x.log", io.BytesIO(data), on_progress=seen.append
    )
    assert seen == sorted(seen)
    assert len(seen) > 10
    assert seen[-1] == len(data)


@pytest.mark.parametrize("chunk_bytes", [1, 7, 61, 4096])
@pytest.mark.parametrize("ending", [b"", b"\n", b"\r\n"], ids=["no-final-newline", "newline", "crlf"])
def test_scan_counts_do_not_depend_on_where_reads_cut(
    hyperscan: matcher.Matcher, monkeypatch: pytest.MonkeyPatch, chunk_bytes: int, ending: bytes
) -> None:
    # ``scan_stream`` reuses one buffer, carries an unfinished line to its front and grows it for
    # a line longer than itself: the counts must be those of a read of the whole file at once.
    data = _junk_log() + b"\n" + b"q" * 100_000 + catalog.load_builtin().patterns[4].examples[0].encode() + ending
    whole = hyperscan.scan_stream(io.BytesIO(data))
    monkeypatch.setattr(matcher, "CHUNK_BYTES", chunk_bytes)
    cut = hyperscan.scan_stream(io.BytesIO(data))
    assert (cut.lines, cut.matched_lines, cut.patterns) == (whole.lines, whole.matched_lines, whole.patterns)
    assert whole.lines == data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    assert whole.matched_lines > 10


def test_line_shape_cache_gives_the_shape_by_its_definition() -> None:
    # ``line_shape`` caches by the line with every digit written as 0; the answer must stay that
    # of its definition (words without digits), for ASCII and non-ASCII text alike.
    rnd = random.Random(5)
    alphabet = "ab Zq09_./-:|[]5\u00e9\u0663\u00b2"
    for _ in range(3000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(80)))
        expected = " ".join(
            w for w in straggler._WORD.findall(text[: straggler.MAX_SHAPE_CHARS]) if not any(c.isdigit() for c in w)
        )
        assert straggler.line_shape(text) == expected
        assert straggler.line_shape(text) == expected  # the second time from the cache


def test_the_builtin_catalog_reads_the_same_with_either_yaml_loader() -> None:
    text = resources.files("trainguard.catalog").joinpath("patterns.yaml").read_text(encoding="utf-8")
    assert yaml.load(text, Loader=catalog._SAFE_LOADER) == yaml.safe_load(text)


def _scan_counts(compiled: matcher.Matcher) -> tuple[int, int, dict[str, int]]:
    stats = compiled.scan_stream(io.BytesIO(_junk_log()))
    return stats.lines, stats.matched_lines, stats.patterns


def test_the_compiled_database_is_cached_and_reused(
    hyperscan: matcher.Matcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(matcher.CACHE_ENV, str(tmp_path))
    first = matcher.build_matcher(catalog.load_builtin(), engine="hyperscan")
    stored = sorted((tmp_path / "hyperscan").glob("*.db"))
    assert len(stored) == 1
    first.match("warm up the per-line database")
    assert len(sorted((tmp_path / "hyperscan").glob("*.db"))) == 2  # the per-line one has its own key
    stamp = stored[0].stat().st_mtime_ns
    second = matcher.build_matcher(catalog.load_builtin(), engine="hyperscan")
    assert stored[0].stat().st_mtime_ns == stamp  # loaded, not compiled and written again
    assert _scan_counts(second) == _scan_counts(first) == _scan_counts(hyperscan)
    line = catalog.load_builtin().patterns[0].examples[0]
    assert second.match(line) == hyperscan.match(line)


def test_a_broken_cache_file_is_compiled_over(
    hyperscan: matcher.Matcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(matcher.CACHE_ENV, str(tmp_path))
    matcher.build_matcher(catalog.load_builtin(), engine="hyperscan")
    (stored,) = (tmp_path / "hyperscan").glob("*.db")
    stored.write_bytes(b"not a database")
    rebuilt = matcher.build_matcher(catalog.load_builtin(), engine="hyperscan")
    assert _scan_counts(rebuilt) == _scan_counts(hyperscan)
    assert stored.read_bytes() != b"not a database"


def test_other_patterns_get_another_cache_entry_and_off_keeps_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "hyperscan" not in matcher.available_engines():
        pytest.skip("Hyperscan is not installed")
    monkeypatch.setenv(matcher.CACHE_ENV, str(tmp_path))
    builtin = catalog.load_builtin()
    matcher.build_matcher(builtin, engine="hyperscan")
    fewer = catalog.Catalog(version=builtin.version, patterns=builtin.patterns[:-1])
    matcher.build_matcher(fewer, engine="hyperscan")
    assert len(list((tmp_path / "hyperscan").glob("*.db"))) == 2
    monkeypatch.setenv(matcher.CACHE_ENV, "off")
    off = tmp_path / "off"
    monkeypatch.setenv("XDG_CACHE_HOME", str(off))
    matcher.build_matcher(fewer, engine="hyperscan")
    assert not off.exists()
