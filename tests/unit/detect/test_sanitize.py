"""clean_line: decoding, escapes, controls, carriage-return bars and the line cap."""

from __future__ import annotations

import pytest

from trainguard.detect import sanitize


def test_decodes_invalid_utf8_with_replacement() -> None:
    assert sanitize.clean_line(b"\xff\xfeCUDA error\n") == "\ufffd\ufffdCUDA error"


def test_strips_ansi_csi_and_osc() -> None:
    raw = b"\x1b[1;31mERROR\x1b[0m \x1b]0;title\x07done \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"
    assert sanitize.clean_line(raw) == "ERROR done link"


def test_drops_nul_and_controls_but_keeps_tab() -> None:
    assert sanitize.clean_line("a\x00b\x07c\td\x7f") == "abc\td"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (" 10%|#   | 1/10\r 20%|##  | 2/10\r100%|####| 10/10\r\n", "100%|####| 10/10"),
        ("loss 1.0\r   \r", "loss 1.0"),
        ("\r\r", ""),
        ("plain\r\n", "plain"),
    ],
)
def test_keeps_the_last_visible_carriage_return_segment(raw: str, shown: str) -> None:
    assert sanitize.clean_line(raw) == shown


def test_long_line_is_cut_keeping_head_and_tail() -> None:
    raw = b"HEAD" + b"x" * 10_000_000 + b"TAIL"
    line = sanitize.clean_line(raw, max_chars=4096)
    assert len(line) <= 4096
    assert line.startswith("HEAD") and line.endswith("TAIL")
    assert "characters cut" in line


def test_line_at_the_limit_is_kept_whole() -> None:
    raw = "y" * 4096
    assert sanitize.clean_line(raw, max_chars=4096) == raw


def test_too_small_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        sanitize.clean_line("x", max_chars=10)
