"""Progress lines: the "training is still moving" signal behind hang and straggler detection.

Place in the loop: ``detect.stream`` and ``detect.static`` offer every line without an error
signature to ``ProgressParser.parse``; a hit resets ``detect.hang``'s silence timer and, when it
carries a rate, feeds ``detect.straggler``. Throughput is always "higher is better": a time per
iteration (Megatron ``elapsed time per iteration (ms)``, tqdm ``s/it``) is inverted.

The built-in patterns cover Megatron-LM, HF Trainer, tqdm / NeMo / Lightning bars, torchtitan,
DeepSpeed and generic ``step N`` / ``iter N`` / ``tokens/s`` / ``samples/sec`` lines. An operator
regex replaces them; its optional named groups are ``step``, ``rate`` (higher is better) and
``seconds`` (time per step, inverted). That regex comes from a user (a policy, a job's comment, the
``--progress-regex`` option), so it runs on the linear-time engine of ``model.user_regex`` (RE2),
never on Python ``re``: a hostile regex and line cannot stall detection.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass

from trainguard.model import user_regex


@dataclass(frozen=True, slots=True)
class Progress:
    """One progress line. ``rate`` is a throughput (higher is better) in ``unit``, or None."""

    step: int | None
    rate: float | None
    unit: str


_NUM = r"(\d[\d,]*(?:\.\d+)?)"

_MEGATRON = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|")
_MEGATRON_MS = re.compile(r"elapsed time per iteration \(ms\):\s*" + _NUM)
_TQDM = re.compile(r"\b(\d+)/\d+ \[[\d:]+<[\d:?]+,\s*" + _NUM + r"\s*(it/s|s/it)")
_TITAN = re.compile(r"\bstep:\s*(\d+)\s+loss:.*?\b(?:tps|wps):\s*" + _NUM)
_HF_DICT = re.compile(r"\{'loss': [-\d.einfa]+,.*'epoch': [\d.]+\}")
_TOKENS = re.compile(r"(?i)\b(?:tokens|tok)(?:/s|/sec|_per_sec(?:ond)?|\s+per\s+sec(?:ond)?)\b[\s:=]*" + _NUM)
_TOKENS_AFTER = re.compile(r"(?i)" + _NUM + r"\s*(?:tokens|tok)/s(?:ec)?\b")
_SAMPLES = re.compile(r"(?i)\bsamples(?:/s|/sec|_per_sec(?:ond)?|\s+per\s+sec(?:ond)?)\b[\s:=]*" + _NUM)
_SAMPLES_AFTER = re.compile(r"(?i)" + _NUM + r"\s*samples/s(?:ec)?\b")
_SEC_PER_STEP = re.compile(r"(?i)" + _NUM + r"\s*(ms|s)/(?:it|iter|step)\b")
_BEFORE_SLASH = "0123456789,. \t\n\r\x0b\x0c\x1c\x1d\x1e\x1fm"
"""What ``_SEC_PER_STEP`` can match before "s/" on an ASCII line: its number, whitespace, the m of ms."""
_STEP = re.compile(r"(?i)(?<![\w/])(?:global_step|step|iter|iteration)\s*[:=]?\s*\[?(\d+)\]?(?:\s*/\s*\d+)?(?![\w.])")


class ProgressParser:
    """Recognises progress lines; ``parse`` returns None for anything else."""

    def __init__(self, regex: str | None = None) -> None:
        try:
            self._custom = user_regex.compile(regex) if regex else None
        except user_regex.RegexRefused as exc:
            raise ValueError(f"progress regex refused: {exc}") from exc

    def parse(self, text: str) -> Progress | None:
        if self._custom is not None:
            return _parse_custom(self._custom, text)
        return _parse_builtin(text)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _parse_custom(regex: user_regex.UserRegex, text: str) -> Progress | None:
    m = regex.search(text)
    if m is None:
        return None
    groups = m.groupdict()
    step = int(groups["step"]) if groups.get("step") else None
    if groups.get("rate"):
        return Progress(step, _number(groups["rate"]), "custom")
    if groups.get("seconds"):
        seconds = _number(groups["seconds"])
        return Progress(step, 1.0 / seconds if seconds > 0 else None, "steps/s")
    return Progress(step, None, "")


def _parse_builtin(text: str) -> Progress | None:
    # Each search runs only when the line holds the literal text its regex needs: most log lines
    # hold none, and ``in`` costs far less than a regex search. The case-insensitive regexes are
    # screened on the lower-cased line only for ASCII lines (Unicode case folding maps more
    # characters, e.g. the Kelvin sign to k); other lines try every regex.
    if "iteration" in text and (m := _MEGATRON.search(text)):
        ms = _MEGATRON_MS.search(text)
        value = _number(ms.group(1)) if ms else 0.0
        return Progress(int(m.group(1)), 1000.0 / value if value > 0 else None, "iter/s")
    if "step:" in text and (m := _TITAN.search(text)):
        return Progress(int(m.group(1)), _number(m.group(2)), "tokens/s")
    if "<" in text and (m := _TQDM.search(text)):
        value = _number(m.group(2))
        if m.group(3) == "s/it":
            value = 1.0 / value if value > 0 else 0.0
        return Progress(int(m.group(1)), value if value > 0 else None, "it/s")
    if "{'loss': " in text and _HF_DICT.search(text):
        return Progress(None, None, "")
    low = text.lower() if text.isascii() else None
    # On an ASCII line the case-insensitive searches start where their literal first occurs
    # (the same leftmost match, found without trying every earlier position).
    if low is None:
        step_m = _STEP.search(text)
    else:
        first = min((at for at in (low.find("step"), low.find("iter")) if at >= 0), default=-1)
        # A match starts at its "step"/"iter", or 7 characters earlier for "global_step".
        step_m = _STEP.search(text, max(0, first - 7)) if first >= 0 else None
    step = int(step_m.group(1)) if step_m else None
    for regex, unit, literal in (
        (_TOKENS, "tokens/s", "tok"),
        (_TOKENS_AFTER, "tokens/s", "tok"),
        (_SAMPLES, "samples/s", "samples"),
        (_SAMPLES_AFTER, "samples/s", "samples"),
    ):
        if (low is None or literal in low) and (m := regex.search(text)):
            return Progress(step, _number(m.group(1)), unit)
    if low is None:
        m = _SEC_PER_STEP.search(text)
    elif (slash := low.find("s/")) >= 0:
        # Before its "s/" a match holds only a number, whitespace and "m": it starts no earlier
        # than the run of such characters before the first "s/".
        m = _SEC_PER_STEP.search(text, len(low[:slash].rstrip(_BEFORE_SLASH)))
    else:
        m = None
    if m is not None:
        value = _number(m.group(1)) / (1000.0 if m.group(2).lower() == "ms" else 1.0)
        return Progress(step, 1.0 / value if value > 0 else None, "steps/s")
    if step is not None:
        return Progress(step, None, "")
    return None


_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T _](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?")


def line_time(text: str) -> float | None:
    """Epoch seconds of an ISO-like timestamp near the start of ``text`` (taken as UTC), else None.

    Used by static analysis, where the arrival time of a line is unknown; only the first 64
    characters are searched, so a date inside a message body does not count.
    """
    m = _ISO.search(text, 0, 64)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    if not (year >= 1 and 1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        return None  # year 0 too: not a date (``timegm`` would raise on it)
    fraction = float("0." + m.group(7)) if m.group(7) else 0.0
    return calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)) + fraction
