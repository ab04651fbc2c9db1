"""The one rule for secret files (trainguard.model.secrets): stripped, and refused when unreadable or empty."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainguard.model import secrets

pytestmark = pytest.mark.unit


def test_the_value_is_the_text_without_its_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("s3cret\n", encoding="utf-8")
    assert secrets.read_secret(path) == "s3cret"


def test_an_empty_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(" \n", encoding="utf-8")
    with pytest.raises(secrets.SecretFileError, match=re.escape(f"{path} is empty")):
        secrets.read_secret(path)


def test_a_missing_file_is_refused_saying_why(tmp_path: Path) -> None:
    with pytest.raises(secrets.SecretFileError, match=r"cannot read .*No such file"):
        secrets.read_secret(tmp_path / "absent")
