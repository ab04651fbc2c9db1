"""Regexes written by users (a job's opt-in comment, a RecoveryPolicy), run by a linear-time engine.

Place in the loop: ``policy.model`` and ``policy.overrides`` call ``check`` so an unsafe regex is
refused with its reason when a policy is loaded or a job's comment is read; ``detect.progress``
(``progressRegex``) and the engine (``checkpointRegex``) call ``compile`` and run the result on
every clean log line of the job.

Why: a job owner chooses these regexes and also chooses what the job prints. Python ``re``
backtracks, so ``(a|a)*$`` or ``\\d*\\d*\\d*\\d*\\d*$`` fed one crafted line runs for minutes on the
event loop every other job's detection shares. No syntactic filter catches every such regex, so
user regexes run on RE2 (``google-re2``, a dependency), whose automata take time linear in the
line; what RE2 cannot run (back-references, look-around) is refused, never handed to ``re``.

The cost per line is linear in the line (at most ``sanitize.DEFAULT_MAX_CHARS``, 64 Ki characters,
as every line is cleaned first) times a factor that grows with the compiled program, so the
program is capped at ``MAX_PROGRAM`` instructions: any realistic progress or checkpoint regex
needs under 100, while ``.{0,500}`` alone needs thousands.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol

from trainguard.model import patterns

MAX_PROGRAM = 1000
"""Most RE2 instructions a user regex may compile to. With it, the worst line of 64 Ki characters
measured takes about a tenth of a second (``a[\\s\\S]{140}c`` on random text); realistic regexes
(``iteration (?P<step>\\d+)/ *\\d+ \\|``: 50 to 100 instructions) take well under a millisecond."""

MAX_MEMORY = 1 << 20
"""RE2's memory budget per regex (program and DFA cache), bytes. A regex that needs more is refused
at compile time; a DFA that outgrows its cache falls back to RE2's NFA, still linear."""


class RegexRefused(ValueError):
    """A user regex the linear-time engine will not run; the message says why, for the owner."""


class RegexMatch(Protocol):
    """What a search returns (RE2's match object): the parts progress parsing and evidence use."""

    def group(self, *groups: int | str) -> Any: ...

    def groupdict(self, default: Any = None) -> dict[str, Any]: ...

    def start(self, group: int | str = 0) -> int: ...

    def end(self, group: int | str = 0) -> int: ...


@dataclass(frozen=True)
class UserRegex:
    """A user regex compiled by RE2. ``search`` is linear in the length of ``text``."""

    pattern: str
    _compiled: Any

    @property
    def groupindex(self) -> dict[str, int]:
        """Named groups -> their numbers, as ``re.Pattern.groupindex``."""
        return dict(self._compiled.groupindex)

    def search(self, text: str) -> RegexMatch | None:
        """The first match in ``text``, or None. A lone surrogate (text that never went through
        ``sanitize.clean_line``) cannot be UTF-8 encoded for RE2: it is searched as U+FFFD."""
        try:
            found: RegexMatch | None = self._compiled.search(text)
        except UnicodeEncodeError:
            found = self._compiled.search(text.encode("utf-8", "replace").decode("utf-8"))
        return found


def _engine() -> Any:
    """The RE2 module, or a refusal: without a linear-time engine no user regex runs at all."""
    try:
        return importlib.import_module("re2")
    except ImportError:
        raise RegexRefused(
            "the linear-time regex engine RE2 (pip package google-re2) is not installed, so user regexes are refused"
        ) from None


def compile(pattern: str) -> UserRegex:
    """``pattern`` compiled by RE2, or ``RegexRefused`` with the reason (never Python ``re``)."""
    if not isinstance(pattern, str):
        raise RegexRefused("a regex must be text")
    re2 = _engine()
    options = re2.Options()
    options.log_errors = False  # a refusal is reported to the user, not printed on stderr
    options.max_mem = MAX_MEMORY
    try:
        compiled = re2.compile(pattern, options)
    except re2.error as exc:
        raise RegexRefused(_reason(pattern, exc)) from None
    size = compiled._regexp.ProgramSize()
    if size > MAX_PROGRAM:
        raise RegexRefused(
            f"too large for the linear-time engine ({size} > {MAX_PROGRAM} RE2 instructions); "
            "wide bounded repeats such as .{0,500} and large classes such as \\p{L} cost many; .* costs few"
        )
    return UserRegex(pattern, compiled)


def check(pattern: str) -> str:
    """``pattern`` unchanged if ``compile`` accepts it, else ``RegexRefused`` (for validators)."""
    compile(pattern)
    return pattern


def check_pattern(spec: patterns.PatternSpec) -> patterns.PatternSpec:
    """An operator pattern (a policy's ``extraPatterns``) unchanged if its regex and every ``extract``
    regex compile in RE2, else ``RegexRefused`` naming the part: they run on every line of every
    covered job (every built-in pattern passes)."""
    for where, regex in (("regex", spec.regex), *((f"extract.{name}", rx) for name, rx in spec.extract.items())):
        try:
            compile(regex)
        except RegexRefused as exc:
            raise RegexRefused(f"pattern {spec.id} {where}: {exc}") from None
    return spec


_UNSUPPORTED = (
    ("(?=", "look-ahead"),
    ("(?!", "negative look-ahead"),
    ("(?<=", "look-behind"),
    ("(?<!", "negative look-behind"),
)


def _reason(pattern: str, exc: Exception) -> str:
    """Why RE2 refused ``pattern``, in words a job owner can act on."""
    detail = exc.args[0] if exc.args else exc
    text = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
    for token, name in _UNSUPPORTED:
        if token in pattern:
            return f"{name} {token!r} needs a backtracking engine; user regexes run on the linear-time RE2"
    numbered = "invalid escape sequence: \\" in text and any(f"\\{d}" in pattern for d in "123456789")
    if numbered or "(?P=" in pattern:
        return "back-references need a backtracking engine; user regexes run on the linear-time RE2"
    if "pattern too large" in text:
        return "too large for the linear-time engine RE2 (compiled program over its memory budget)"
    return f"does not compile in the linear-time engine RE2: {text}"
