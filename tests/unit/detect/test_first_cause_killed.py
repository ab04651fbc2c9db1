"""A rank killed by a signal is the first cause, not its peers' connection-reset lines.

Seen on the real cluster (kill -9 of rank 1 on node2): rank 0's gloo error is printed first, and
all four lines arrive in the same read, so arrival order cannot decide.
"""

from __future__ import annotations

import io

from trainguard.detect import catalog, matcher, static, stream
from trainguard.model import vocab

KILL9 = [
    "0: [rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error "
    "[127.0.0.1]:8579: Connection reset by peer. This is typically caused by a remote worker crashing.",
    "srun: error: node2: task 1: Killed",
    "0: slurmstepd-node1: error: *** STEP 40.0 ON node1 CANCELLED AT 2026-11-29T16:20:01 ***",
    "srun: error: node1: task 0: Terminated",
]


def test_the_killed_task_is_the_first_cause_and_its_node_the_suspect() -> None:
    compiled = matcher.build_matcher(catalog.load_builtin(), engine="python")
    data = ("\n".join(KILL9) + "\n").encode()
    result = static.FileAnalyzer(compiled, stream.DetectionSettings()).analyze("kill9.log", io.BytesIO(data))
    assert (result.symptom, result.category) == (vocab.Symptom.CRASH, vocab.Category.PROCESS_SIGNAL_KILLED)
    assert result.suspect_nodes == ["node2"]
    assert result.suspect_ranks == [1]


def test_a_terminated_task_stays_a_cascade() -> None:
    compiled = matcher.build_matcher(catalog.load_builtin(), engine="python")
    data = ("\n".join([KILL9[3], "0: [rank0]: ValueError: bad shape in batch 7"]) + "\n").encode()
    result = static.FileAnalyzer(compiled, stream.DetectionSettings()).analyze("t.log", io.BytesIO(data))
    assert result.category == vocab.Category.PYTHON_EXCEPTION
