"""The stored digests of log lines never change bytes: positions saved by an earlier release resume."""

from __future__ import annotations

import hashlib

import pytest

from trainguard.act import switch
from trainguard.k8s import podlog_parts
from trainguard.model import vocab
from trainguard.signals import linehash, loki, victorialogs

pytestmark = pytest.mark.unit


def test_each_source_keeps_the_digest_it_stored_before_the_helper() -> None:
    line = "rank 3: Xid 79 \udcff GPU has fallen off the bus"  # a surrogate escape from undecodable bytes
    assert loki.line_hash(line) == hashlib.sha256(line.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    assert podlog_parts.line_hash("pod-0", "main", line) == hashlib.sha256(
        f"pod-0\0main\0{line}".encode("utf-8", "surrogateescape")).hexdigest()[:16]
    lone = "json \ud800 surrogate"  # JSON may decode to a lone surrogate: only "replace" encodes it
    assert victorialogs.row_hash("s1", lone) == hashlib.sha256(
        f"s1\0{lone}".encode("utf-8", "replace")).hexdigest()[:16]
    assert linehash.digest("a", "b", chars=4) != linehash.digest("ab", chars=4)


@pytest.mark.parametrize(("declared", "switch_on", "paused", "effective"), [
    (vocab.Mode.ACTION, True, None, vocab.Mode.ACTION),
    (vocab.Mode.ACTION, False, None, vocab.Mode.MONITOR),
    (vocab.Mode.ACTION, True, "paused by ops", vocab.Mode.MONITOR),
    (vocab.Mode.MONITOR, True, None, vocab.Mode.MONITOR),
])
def test_a_policy_acts_only_with_both_keys_and_no_pause(
        declared: vocab.Mode, switch_on: bool, paused: str | None, effective: vocab.Mode) -> None:
    assert switch.effective_mode(declared, switch_on, paused) == effective
