"""The multi-pattern matcher: which catalog patterns match a log line, or every line of a file.

Place in the loop: ``detect.catalog`` loads the patterns; this module compiles them once and is
the hot path of crash detection (the detectors call ``Matcher.match`` per clean line from
``detect.sanitize``, and ``trainguard scan`` calls ``Matcher.scan_file`` over whole files).

Three engines give identical answers on the catalog: Hyperscan (all patterns in one database,
one pass over the text), RE2 (``re2.Set``) and pure Python ``re``. The catalog keeps to the
subset of regex syntax on which they and ripgrep agree (see ``detect.catalog.agreement_problems``),
which is what lets ``scan_file`` promise the same matched-line count as
``rg -c -f <(trainguard patterns export --format lines) FILE``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import platform
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast

from trainguard.detect import catalog as catalogs
from trainguard.model import user_regex

ENGINES = ("hyperscan", "re2", "python")
"""Engines in the order ``auto`` tries them."""

CHUNK_BYTES = 32 * 1024 * 1024
"""How much of a file ``scan_file`` reads at once: big enough that per-call overhead vanishes,
small enough to keep memory flat on shared nodes. Chunks are cut at the last newline."""


class MatcherError(ValueError):
    """The requested engine is unavailable or a pattern does not compile in it."""


@dataclass
class ScanStats:
    """What ``trainguard scan --stats`` prints: the raw matcher over one file."""

    lines: int
    matched_lines: int
    patterns: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def available_engines() -> list[str]:
    """Engines importable on this machine, in ``auto`` order."""
    found = [name for name in ("hyperscan", "re2") if importlib.util.find_spec(name) is not None]
    return [*found, "python"]


def build_matcher(catalog: catalogs.Catalog, engine: str = "auto") -> Matcher:
    """Compile ``catalog`` with ``engine`` (``auto``: Hyperscan, else RE2, else Python)."""
    if engine == "auto":
        engine = available_engines()[0]
    if engine not in ENGINES:
        raise MatcherError(f"unknown engine {engine!r}; choose one of auto, {', '.join(ENGINES)}")
    if engine not in available_engines():
        raise MatcherError(f"engine {engine!r} is not installed on this machine")
    return Matcher(catalog, engine)


def _python_flags(regex: str) -> tuple[str, int]:
    """Python flags equivalent to a leading ``(?i)``, ASCII semantics as in Hyperscan's byte mode."""
    if regex.startswith("(?i)"):
        return regex[4:], re.IGNORECASE | re.ASCII
    return regex, re.ASCII


CACHE_ENV = "TRAINGUARD_CACHE_DIR"
"""Where compiled Hyperscan databases are kept (default ``$XDG_CACHE_HOME/trainguard`` or
``~/.cache/trainguard``); ``off`` keeps none."""


def _cache_path(expressions: list[bytes], flags: list[int]) -> Path | None:
    """The file holding the compiled database of exactly these patterns for this machine, or None.

    Compiling the catalog costs a tenth of a second or more, a good part of a `trainguard scan`
    on a few hundred MB. The key covers the Hyperscan version, the CPU's feature flags (a
    database is tuned to the instruction set it was built on) and every expression and flag, so
    a changed catalog, operator patterns or another machine sharing the home directory never
    load a database that is not theirs.
    """
    import hyperscan

    setting = os.environ.get(CACHE_ENV, "")
    if setting == "off":
        return None
    if setting:
        root = Path(setting)
    elif xdg := os.environ.get("XDG_CACHE_HOME"):
        root = Path(xdg) / "trainguard"
    else:
        try:
            root = Path.home() / ".cache" / "trainguard"
        except (RuntimeError, KeyError):  # no home directory (a bare container user): no cache
            return None
    digest = hashlib.sha256()
    digest.update(str(getattr(hyperscan, "__version__", "")).encode() + b"\0" + _cpu_flags() + b"\0")
    for expression, flag in zip(expressions, flags, strict=True):
        digest.update(expression + b"\0" + str(flag).encode() + b"\0")
    return root / "hyperscan" / f"{digest.hexdigest()}.db"


def _cpu_flags() -> bytes:
    try:
        with open("/proc/cpuinfo", "rb") as handle:
            for line in handle:
                if line.startswith((b"flags", b"Features")):
                    return line
    except OSError:
        pass
    return platform.machine().encode()


def _load_cached(path: Path) -> Any:
    """The database stored at ``path``, or None when there is none or it does not load."""
    import hyperscan

    try:
        database = hyperscan.loadb(path.read_bytes(), hyperscan.HS_MODE_BLOCK)
        database.scratch = hyperscan.Scratch(database)  # compile() allocates one; loadb() does not
    except (OSError, hyperscan.error, TypeError, ValueError):
        return None
    return database


def _store_cached(path: Path, database: Any) -> None:
    """Keep ``database`` at ``path`` for the next start; a cache that cannot be written is skipped."""
    import hyperscan

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as handle:
            handle.write(hyperscan.dumpb(database))
        os.replace(handle.name, path)  # readers see the whole file or none
    except (OSError, hyperscan.error):
        return


class Matcher:
    """A compiled catalog. ``match`` answers per clean line; ``scan_file`` counts a whole file."""

    def __init__(self, catalog: catalogs.Catalog, engine: str) -> None:
        self.engine = engine
        self.catalog = catalog
        self._ids = [spec.id for spec in catalog.patterns]
        # Python regexes are always built: the python engine uses them, and every engine uses
        # them for ``extract``, which runs only on the rare lines that matched.
        self._python: list[tuple[re.Pattern[str], re.Pattern[bytes]]] = []
        for spec in catalog.patterns:
            body, flags = _python_flags(spec.regex)
            self._python.append((re.compile(body, flags), re.compile(body.encode(), flags | re.MULTILINE)))
        # ``extract`` regexes come from the catalog, operator files and policies' extraPatterns: they
        # run on RE2 (linear time, ``model.user_regex``) like every other regex a user wrote.
        self._extract: dict[str, dict[str, user_regex.UserRegex]] = {}
        for spec in catalog.patterns:
            try:
                self._extract[spec.id] = {name: user_regex.compile(rx) for name, rx in spec.extract.items()}
            except user_regex.RegexRefused as exc:
                raise MatcherError(f"pattern {spec.id}: an extract regex is refused: {exc}") from None
        self._hs_line: Any = None
        self._hs_chunk: Any = None
        self._re2_set: Any = None
        self._re2_chunk: list[Any] = []
        if engine == "hyperscan":
            # Compile the chunk database now (it also validates the catalog); the per-line one on
            # the first ``match``, so `trainguard scan` pays for one compilation, not two.
            self._hs_chunk = self._compile_hyperscan(single_match=False)
        elif engine == "re2":
            self._re2_set = self._compile_re2()

    # -- compilation ------------------------------------------------------------------------

    def _compile_hyperscan(self, single_match: bool) -> Any:
        """One Hyperscan block-mode database holding every pattern.

        The per-line database reports each pattern once (SINGLEMATCH) since a line is scanned
        alone; the chunk database must report every line a pattern matches, so it cannot.
        """
        import hyperscan

        expressions: list[bytes] = []
        flags: list[int] = []
        for spec in self.catalog.patterns:
            body = spec.regex
            flag = hyperscan.HS_FLAG_MULTILINE | (hyperscan.HS_FLAG_SINGLEMATCH if single_match else 0)
            if body.startswith("(?i)"):
                body, flag = body[4:], flag | hyperscan.HS_FLAG_CASELESS
            expressions.append(body.encode())
            flags.append(flag)
        ids = list(range(len(expressions)))
        cached = _cache_path(expressions, flags)
        if cached is not None and (database := _load_cached(cached)) is not None:
            return database
        database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        try:
            database.compile(expressions=expressions, ids=ids, elements=len(ids), flags=flags)
        except hyperscan.error as exc:
            raise MatcherError(f"Hyperscan cannot compile the catalog: {exc}") from exc
        if cached is not None:
            _store_cached(cached, database)
        return database

    def _compile_re2(self) -> Any:
        import re2

        options = re2.Options()
        pattern_set = re2.Set.SearchSet(options)
        for spec in self.catalog.patterns:
            try:
                pattern_set.Add(spec.regex)
            except re2.error as exc:
                raise MatcherError(f"RE2 cannot compile pattern {spec.id}: {exc}") from exc
        pattern_set.Compile()
        self._re2_chunk = [re2.compile(b"(?m)" + spec.regex.encode()) for spec in self.catalog.patterns]
        return pattern_set

    # -- per line ---------------------------------------------------------------------------

    def match(self, line: str) -> list[str]:
        """Ids of the patterns that match this clean line, in catalog order."""
        if self.engine == "hyperscan":
            hits: set[int] = set()
            data = line.encode("utf-8", errors="surrogateescape")

            def on_match(index: int, start: int, end: int, flags: int, context: object) -> None:
                hits.add(index)

            if self._hs_line is None:
                self._hs_line = self._compile_hyperscan(single_match=True)
            self._hs_line.scan(data, match_event_handler=on_match)
            return [self._ids[i] for i in sorted(hits)]
        if self.engine == "re2":
            return [self._ids[i] for i in sorted(self._re2_set.Match(line) or ())]
        return [self._ids[i] for i, (rx, _) in enumerate(self._python) if rx.search(line)]

    def candidate_lines(self, block: bytes) -> set[int] | None:
        """Start offsets of the lines of ``block`` on which some pattern match ends (one scan call).

        Every line that ``match`` would match alone is among them: the patterns are compiled
        multi-line, so ``^``, ``$`` and word boundaries see a newline at either end of a line
        as they see the ends of a lone line. A match may run across lines; the line it ends on
        is then a candidate that ``match`` rejects. None when the engine has no block scan
        (every line is a candidate).
        """
        if self.engine != "hyperscan":
            return None
        return line_starts(self._hs_chunk, block)

    def extract(self, pattern_id: str, line: str) -> dict[str, str]:
        """The pattern's ``extract`` fields found in ``line`` (first match of each), e.g. host, rank."""
        found: dict[str, str] = {}
        for name, rx in self._extract[pattern_id].items():
            hit = rx.search(line)
            if hit is not None and hit.group(1) is not None:
                found[name] = hit.group(1)
        return found

    # -- whole files ------------------------------------------------------------------------

    def scan_file(self, path: Path) -> ScanStats:
        """Count lines, matched lines and lines per pattern over the raw bytes of ``path``.

        No per-line Python loop: the file is read in chunks cut at a newline, each chunk is
        scanned in one call, and match offsets are mapped to lines. Raises OSError when the
        file cannot be read.
        """
        with path.open("rb") as handle:
            return self.scan_stream(handle)

    def scan_stream(self, handle: BinaryIO) -> ScanStats:
        """``scan_file`` over an open binary stream (standard input, a file already opened).

        The file is read into one reused buffer (no copy of the data in Python): each pass
        scans the buffer up to its last newline, then moves the unfinished line to the front.
        A line longer than the buffer grows it.
        """
        started = time.perf_counter()
        reader = cast(io.BufferedIOBase, handle)
        counts = [0] * len(self._ids)
        lines = 0
        matched = 0
        buffer = bytearray(CHUNK_BYTES)
        filled = 0
        last_byte = -1
        while True:
            with memoryview(buffer) as view:
                read = reader.readinto(view[filled:])
            if read:
                filled += read
                last_byte = buffer[filled - 1]
                # The carried-over start of a line holds no newline: look in what was just read.
                end = buffer.rfind(b"\n", filled - read, filled) + 1
                if not end:  # no newline yet: a line longer than the buffer
                    if filled == len(buffer):
                        buffer.extend(bytes(len(buffer)))
                    continue
            else:
                end = filled  # the last line, without a newline
            if end:
                lines += buffer.count(b"\n", 0, end)
                matched += self._scan_chunk(buffer, end, counts)
                buffer[: filled - end] = buffer[end:filled]
                filled -= end
            if not read:
                break
        if last_byte not in (-1, 0x0A):
            lines += 1  # a last line without a newline
        patterns = {self._ids[i]: n for i, n in enumerate(counts) if n}
        return ScanStats(lines=lines, matched_lines=matched, patterns=patterns, seconds=time.perf_counter() - started)

    def _scan_chunk(self, buffer: bytearray, end: int, counts: list[int]) -> int:
        """Add per-pattern line counts of ``buffer[:end]`` (whole lines) to ``counts``; return its matched lines."""
        # Each hit is (pattern index, offset inside the line it belongs to).
        line_starts: set[int] = set()
        seen: set[tuple[int, int]] = set()

        def record(index: int, offset: int) -> None:
            start = buffer.rfind(b"\n", 0, offset) + 1
            key = (index, start)
            if key not in seen:
                seen.add(key)
                counts[index] += 1
                line_starts.add(start)

        if self.engine == "hyperscan":
            self._scan_hyperscan(buffer, end, record)
        else:
            self._scan_regexes(bytes(buffer[:end]), record)
        return len(line_starts)

    def _scan_hyperscan(self, buffer: bytearray, end: int, record: Callable[[int, int], None]) -> None:
        # A pattern can report many end offsets on one line; skip them cheaply until the
        # next newline rather than calling ``record`` for each.
        skip_until = [-1] * len(self._ids)

        def on_match(index: int, start: int, stop: int, flags: int, context: object) -> None:
            if stop <= skip_until[index]:
                return
            # ``stop`` is one past the last matched byte; that byte is on the line we want.
            offset = stop - 1 if stop > 0 else 0
            newline = buffer.find(b"\n", offset, end)
            skip_until[index] = newline if newline >= 0 else end
            record(index, offset)

        with memoryview(buffer) as view, view[:end] as chunk:
            self._hs_chunk.scan(chunk, match_event_handler=on_match)

    def _scan_regexes(self, chunk: bytes, record: Callable[[int, int], None]) -> None:
        compiled: list[Any] = self._re2_chunk if self.engine == "re2" else [rx for _, rx in self._python]
        for index, rx in enumerate(compiled):
            position = 0
            while True:
                hit = rx.search(chunk, position)
                if hit is None:
                    break
                record(index, hit.start())
                newline = chunk.find(b"\n", hit.start())
                if newline < 0:
                    break
                position = newline + 1


def line_starts(database: Any, data: bytes) -> set[int]:
    """Start offsets of the lines of ``data`` on which a match of the Hyperscan block ``database``
    ends (one scan call; several matches on one line cost one ``rfind``)."""
    starts: set[int] = set()
    last = [-1, -1]  # the last line recorded: its start and the start of the next one

    def on_match(index: int, start: int, end: int, flags: int, context: object) -> None:
        offset = end - 1 if end > 0 else 0
        if last[0] <= offset < last[1]:
            return  # another match on the line just recorded
        line_start = data.rfind(b"\n", 0, offset) + 1
        starts.add(line_start)
        newline = data.find(b"\n", offset)
        last[0], last[1] = line_start, newline + 1 if newline >= 0 else len(data) + 1

    database.scan(data, match_event_handler=on_match)
    return starts
