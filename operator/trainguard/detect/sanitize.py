"""Turns one raw log line (bytes or text) into the clean text the matcher and detectors see.

Place in the loop: ``signals`` tailers hand raw lines to detection; ``clean_line`` runs first,
so ``detect.matcher`` never sees terminal escapes, NULs, tqdm carriage-return bars or a 10 MB
line that would make a regex engine spin. Every step is a single linear pass.
"""

from __future__ import annotations

import re

DEFAULT_MAX_CHARS = 64 * 1024
"""Longest line kept whole (characters). Real error lines are far shorter; longer lines are
usually dumped tensors or minified JSON, whose head and tail are what a reader needs."""

CUT_MARK = " …[trainguard: {n} characters cut]… "
"""Inserted where an over-long line was cut, so evidence shows that text is missing."""

# CSI (ESC [ ... final byte), OSC (ESC ] ... BEL or ESC \), and two-byte ESC sequences.
# The 8-bit C1 forms (0x9b CSI, 0x9d OSC) are included because some terminals emit them.
_ANSI = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[@-Z\\-_]"
)
# C0 controls except tab (CR is handled before this runs), DEL, and the remaining C1 controls.
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def clean_line(raw: bytes | str, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """Return ``raw`` as clean single-line text.

    Decodes UTF-8 with replacement characters, drops a trailing newline, keeps only the last
    non-empty carriage-return segment (what a terminal would show for a progress bar), strips
    ANSI CSI/OSC escapes and control characters other than tab, and caps the result at
    ``max_chars`` keeping head and tail around a visible cut mark.
    """
    if max_chars < 2 * len(CUT_MARK):
        raise ValueError(f"max_chars must be at least {2 * len(CUT_MARK)}, got {max_chars}")
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes | bytearray) else raw
    text = text.rstrip("\r\n")
    if "\r" in text:
        text = _last_cr_segment(text)
    if len(text) <= max_chars:
        return _strip(text)
    # Too long: clean only a head and a tail window (escapes may shrink them), then cut.
    head, tail = _strip(text[:max_chars]), _strip(text[-max_chars:])
    if len(text) <= 2 * max_chars:
        whole = _strip(text)
        if len(whole) <= max_chars:
            return whole
        head, tail = whole[:max_chars], whole[-max_chars:]
        total = len(whole)
    else:
        total = len(head) + len(tail) + (len(text) - 2 * max_chars)
    widest = CUT_MARK.format(n=total)  # the final mark can only be shorter
    keep = max_chars - len(widest)
    keep_head = keep // 2
    keep_tail = keep - keep_head
    return head[:keep_head] + CUT_MARK.format(n=total - keep) + tail[len(tail) - keep_tail :]


def _strip(text: str) -> str:
    if "\x1b" in text or "\x9b" in text or "\x9d" in text:
        text = _ANSI.sub("", text)
    return _CONTROLS.sub("", text)


def _last_cr_segment(text: str) -> str:
    """The last carriage-return segment with visible content (``a\\rb\\r`` shows ``b``)."""
    end = len(text)
    while end > 0:
        start = text.rfind("\r", 0, end) + 1
        if text[start:end].strip():
            return text[start:end]
        end = start - 1
    return ""
