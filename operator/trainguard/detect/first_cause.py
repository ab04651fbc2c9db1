"""First cause vs cascade: which line started the failure, and whose node/rank printed it.

Place in the loop: ``detect.crash`` (live, after its settle window) and ``detect.static`` (whole
file) hand all evidence of one attempt to ``find_first_cause``; the result becomes the crash
anomaly's category, attribution hint and suspects. Pure: no I/O, no clock.

Why a ranking and not "the first error line": when one rank dies, every other rank prints NCCL
watchdog timeouts, ``remote process exited``, SIGABRT and ``ChildFailedError`` summaries. Those
are loud and numerous but are symptoms (NVRx, Meta's "misleading proximal cause", Minder). So:

1. hardware evidence (Xid, ECC, fallen off the bus, NVLink, IB) outranks everything;
2. a specific error (CUDA error, OOM, segfault, a Python exception that is not itself a
   distributed-backend symptom, filesystem, rendezvous) outranks
3. hardware *warnings* (e.g. an NCCL NET/IB retry warning), which outrank
4. a task killed by a signal (``srun: error: node2: task 1: Killed``), which outranks
5. cascade symptoms (NCCL timeouts, ``remote process exited``, peers' connection resets,
   SIGTERM/SIGABRT teardown);
6. other warnings and info lines are context, never a cause.

Within a class the earliest line wins, except that among cascade symptoms an NCCL timeout wins:
the SIGABRT/``terminate called`` teardown and "communicator aborted" lines are what the watchdog
does *after* the timeout, even when a rank prints them first. On one line, the most specific
category wins (a CUDA error wrapped in a watchdog or Python exception is a CUDA error). When the
watchdog reports an exception (``... watchdog thread terminated with exception: <reason>``), the
reason decides whether the line is a cascade: a timeout inside is one, a CUDA error is not. When
the initiating line's pattern has no attribution hint, a line reporting the same event (same
class and category, e.g. the ``Killed`` of a batch script and slurmstepd's oom-kill) supplies it.
Suspects are only the node/rank of the initiating event
(for hardware, every node with hardware evidence). When only timeouts are present, the rank
that lags (a lower ``last completed NCCL work`` than its peers in PyTorch >= 2.2, a lower
``SeqNum`` before) or never reports is named, else the elastic ``Root Cause`` block's rank/host.
"""

from __future__ import annotations

import bisect
import enum
import re
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from trainguard.detect import hosts
from trainguard.model import anomalies, vocab

C = vocab.Category

HARDWARE_CATEGORIES = frozenset({C.GPU_XID_HARDWARE, C.ECC_MEMORY, C.GPU_FALLEN_OFF_BUS, C.NVLINK, C.NCCL_NETWORK_IB})
CASCADE_CATEGORIES = frozenset({C.NCCL_TIMEOUT, C.PROCESS_SIGNAL_KILLED})
GENERIC_CATEGORIES = frozenset({C.PYTHON_EXCEPTION, C.NCCL_ERROR, C.CUDA_ERROR_OTHER})
"""Broad categories: on one line, a more specific category wins over these."""
TEXT_DECIDES = GENERIC_CATEGORIES | {C.SEGFAULT}
"""Categories whose lines are also printed as a *consequence* of a peer's failure (a SIGABRT from the
NCCL watchdog shows up as "Aborted"/"terminate called"); their text decides whether they are a cascade."""
_CASCADE_TEXT = re.compile(
    r"(?i)remote process exited|connection reset by peer|connection closed by|broken pipe|c10::DistBackendError"
    r"|ChildFailedError|communicator was aborted|ncclRemoteError|SIGABRT|SIGTERM|signal [6f]\b|Signal 15\b"
    r"|exitcode\s*:\s*-(?:6|15)\b|closing signal|Some NCCL operations have failed|watchdog"
    r"|\bAborted\b|\bTerminated\b|process group .*(?:aborted|destroyed)|heartbeat monitor"
)

SCHEDULER_DECISIONS = frozenset({"slurm.cancelled", "slurm.cancelled_time_limit", "slurm.cancelled_preemption"})
"""Catalog entries for a job the scheduler ended by decision (a cancel, the time limit, preemption):
the node in ``*** JOB 1 ON node3 CANCELLED ...`` is where slurmstepd ran, not what failed, so such a
first cause names no suspect (naming it would make a busy node look like a lemon). A cancel for a
node failure keeps its node."""

_PEER_GONE_PATTERNS = frozenset({"nccl.error_remote", "nccl.socket_connection_error"})
"""Network evidence that only says a peer's connection went away (ncclRemoteError, a socket reset or
closed by the peer). By the pattern, not the line's text: an IB completion error quoted on the same
line as "remote process exited" is still hardware evidence."""

_WRAPPED_REASON = re.compile(r"terminated with exception: ")
"""The watchdog's report of why it ended; only the text after it decides whether it is a cascade."""
_CUT_REASON = re.compile(r"(?:\[Rank \d+\]?)?")
"""What is left of a watchdog's reason when the line was wrapped right after it started."""
_EMBEDDED_TRACEBACK = re.compile(r"Traceback \(most recent call last\):\s*$")
_XID_PCI = re.compile(r"Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\)")
_APPLICATION_XIDS = frozenset({13, 31, 43})
"""Xids NVIDIA's catalogue resolves as the application's (graphics exception, MMU fault, stopped)."""
_CONSEQUENCE_XIDS = frozenset({109})

DEFAULT_ATTRIBUTION: Mapping[vocab.Category, vocab.Attribution] = {
    C.GPU_XID_HARDWARE: vocab.Attribution.HARDWARE,
    C.ECC_MEMORY: vocab.Attribution.HARDWARE,
    C.GPU_FALLEN_OFF_BUS: vocab.Attribution.HARDWARE,
    C.NVLINK: vocab.Attribution.HARDWARE,
    C.NCCL_NETWORK_IB: vocab.Attribution.HARDWARE,
    C.PYTHON_EXCEPTION: vocab.Attribution.APPLICATION,
    C.OOM_GPU: vocab.Attribution.APPLICATION,
    C.CUDA_ILLEGAL_MEMORY: vocab.Attribution.APPLICATION,
    C.FILESYSTEM_IO: vocab.Attribution.SYSTEM,
    C.RENDEZVOUS_FAILURE: vocab.Attribution.SYSTEM,
    C.BUS_ERROR_SHM: vocab.Attribution.SYSTEM,
}
"""Used when the catalog gives no hint for a pattern id (e.g. evidence from a job's exit state)."""


class Rank(enum.IntEnum):
    """Strength of a line as a first cause; lower is stronger."""

    HARDWARE = 0
    SPECIFIC = 1
    HARDWARE_WARNING = 2
    KILLED = 3
    CASCADE = 4
    CONTEXT = 5


def classify(evidence: anomalies.Evidence) -> Rank:
    """How strongly one line can be the first cause."""
    serious = evidence.severity in (vocab.Severity.FATAL, vocab.Severity.ERROR)
    if evidence.category in HARDWARE_CATEGORIES:
        if serious and evidence.pattern in _PEER_GONE_PATTERNS:
            # "Connection reset/closed by peer", "remote process exited": the socket a peer held
            # went away, which is what a dying peer looks like (item 5 above), not a link fault.
            return Rank.CASCADE
        return Rank.HARDWARE if serious else Rank.HARDWARE_WARNING
    if not serious or evidence.category == C.NONE:
        return Rank.CONTEXT
    if evidence.pattern == "python.exception_line" and _EMBEDDED_TRACEBACK.search(evidence.text):
        # `OSError: Traceback (most recent call last):` is a worker's traceback re-raised as text
        # (PyTorch < 1.3 DataLoader); the embedded traceback's own last line says what failed.
        return Rank.CONTEXT
    if evidence.category == C.PROCESS_SIGNAL_KILLED and not _CASCADE_TEXT.search(evidence.text):
        # A task killed outright (SIGKILL: `srun: error: node2: task 1: Killed`, kill -9, the OOM
        # killer) starts a cascade; its peers' "Connection reset by peer" / SIGTERM lines follow it,
        # sometimes read in the same batch and printed first.
        return Rank.KILLED
    if evidence.category in CASCADE_CATEGORIES:
        return Rank.CASCADE
    if evidence.category in TEXT_DECIDES and _CASCADE_TEXT.search(_reason_text(evidence.text)):
        return Rank.CASCADE
    return Rank.SPECIFIC


@dataclass(frozen=True)
class FirstCause:
    """The reading of one attempt's evidence. ``evidence`` starts with the initiating line."""

    symptom: vocab.Symptom
    category: vocab.Category
    attribution: vocab.Attribution
    suspect_nodes: list[str]
    suspect_ranks: list[int]
    evidence: list[anomalies.Evidence]
    initiating: anomalies.Evidence | None


_SEQNUM = re.compile(r"SeqNum=(\d+)")
_LAST_COMPLETED = re.compile(r"last completed NCCL work: (-?\d+)")
"""PyTorch >= 2.2 (``Timeout at NCCL work: N, last enqueued NCCL work: E, last completed NCCL work: C``,
from 2.4 also ``Exception (either an error or timeout) detected by watchdog at work: N, ...``): the
rank's own progress, -1 before its first collective completed."""
_PROCESS_GROUP = re.compile(r"\[PG (?:ID )?(\d+)")
"""The process group a ProcessGroupNCCL line speaks of (``[PG 1 Rank 3]``, ``[PG ID 2 PG GUID 9 Rank 4]``);
sequence numbers count per group, so only numbers of the same group are compared."""


def find_first_cause(
    evidence: Sequence[anomalies.Evidence],
    *,
    hints: Mapping[str, vocab.Attribution] | None = None,
    root_cause: hosts.RootCause | None = None,
    node_of: Callable[[int], str | None] | None = None,
    ranks_seen: Collection[int] = (),
) -> FirstCause | None:
    """Pick the initiating event among ``evidence`` (any order); None if nothing can be a cause.

    ``hints`` maps pattern id -> the catalog's attribution hint; ``node_of`` maps a rank to its
    node (``hosts.RankMap.node_of``); ``ranks_seen`` are all ranks that printed anything, used to
    spot the rank that never reported a timeout.
    """
    ordered = sorted(evidence, key=lambda e: e.line)
    ranked = [(classify(e), index, e) for index, e in enumerate(ordered)]
    ranked = _truncated_cascade(_after_application_xid(_unwrap(ranked)))
    candidates = [item for item in ranked if item[0] < Rank.CONTEXT]
    if all(item[0] == Rank.HARDWARE_WARNING for item in candidates):
        return None  # warnings alone never make a crash; they stay as context
    best_rank, _, first = min(
        candidates, key=lambda item: (item[0], _cascade_order(item), item[2].line, _tie_break(item[2]), item[1])
    )
    category = first.category
    hint = _hint(first, hints) or DEFAULT_ATTRIBUTION.get(category, vocab.Attribution.UNKNOWN)
    if hint == vocab.Attribution.UNKNOWN:
        for rank_class, _, item in ranked:
            same_event = rank_class == best_rank and item.category == category
            if same_event and (other := _hint(item, hints)) not in (None, vocab.Attribution.UNKNOWN):
                hint = other
                break
    symptom = vocab.Symptom.CRASH
    if best_rank == Rank.CASCADE and category == C.NCCL_TIMEOUT:
        symptom = vocab.Symptom.HANG

    nodes: list[str] = []
    ranks: list[int] = []
    if best_rank == Rank.HARDWARE:
        for rank_class, _, item in ranked:
            if rank_class == Rank.HARDWARE:
                _add_suspect(item, nodes, ranks, node_of)
    elif best_rank == Rank.CASCADE and category == C.NCCL_TIMEOUT:
        for rank in _lagging_ranks(ordered, ranks_seen):
            _add(ranks, rank)
            node = node_of(rank) if node_of else None
            if node:
                _add(nodes, node)
    elif first.pattern not in SCHEDULER_DECISIONS:
        _add_suspect(first, nodes, ranks, node_of)
        if not nodes and not ranks:  # the same event, reported again with its place (oom_kill + srun)
            for rank_class, _, item in ranked:
                if rank_class == best_rank and item.category == category and (item.node or item.rank is not None):
                    _add_suspect(item, nodes, ranks, node_of)
                    break
    if (
        not nodes
        and not ranks
        and root_cause is not None
        and best_rank != Rank.HARDWARE
        and not _collateral(root_cause)
    ):
        if root_cause.host:
            _add(nodes, root_cause.host)
        if root_cause.rank is not None:
            _add(ranks, root_cause.rank)
    if root_cause is not None and root_cause.host and root_cause.rank is not None and ranks == [root_cause.rank]:
        _add(nodes, root_cause.host)

    rest = [item for item in ranked if item[2] is not first]
    rest.sort(key=lambda item: (item[0] >= Rank.CONTEXT, item[1]))
    return FirstCause(
        symptom=symptom,
        category=category,
        attribution=hint,
        suspect_nodes=nodes,
        suspect_ranks=ranks,
        evidence=[first, *(item[2] for item in rest)],
        initiating=first,
    )


def _unwrap(ranked: list[tuple[Rank, int, anomalies.Evidence]]) -> list[tuple[Rank, int, anomalies.Evidence]]:
    """A wrapper line (``RuntimeError: <gloo timeout>``, ``DistBackendError: <NCCL error>``) is the
    line of the error it wraps: when the same line carries a serious non-wrapper category, the
    wrapper's evidence is context, so the wrapped error's class (cause or cascade) decides. A C++
    ``terminate called after throwing`` line defers in the same way to its ``what():`` line."""
    wrapped_lines = {
        e.line
        for rank_class, _, e in ranked
        if rank_class < Rank.CONTEXT and e.category not in _WRAPPER_CATEGORIES and e.line > 0
    }
    said_lines = {e.line for rank_class, _, e in ranked if rank_class < Rank.CONTEXT and e.line > 0}
    return [
        (Rank.CONTEXT, index, e)
        if (e.category in _WRAPPER_CATEGORIES and e.pattern not in _OWN_CALL_FAILED and e.line in wrapped_lines)
        or ((e.pattern in _NEXT_LINE_WRAPPERS or _reason_cut(e)) and e.line + 1 in said_lines)
        else (rank_class, index, e)
        for rank_class, index, e in ranked
    ]


def _reason_cut(e: anomalies.Evidence) -> bool:
    """A watchdog report whose reason was cut at the end of the line (a terminal or pager wrapping
    ``terminated with exception: [Rank 1`` before the reason): like ``terminate called``, its next
    line says what it was, when that line is recognised."""
    m = _WRAPPED_REASON.search(e.text)
    return m is not None and _CUT_REASON.fullmatch(e.text[m.end() :].strip()) is not None


def _after_application_xid(
    ranked: list[tuple[Rank, int, anomalies.Evidence]],
) -> list[tuple[Rank, int, anomalies.Evidence]]:
    """An Xid 109 (context-switch timeout) on a GPU that already reported an application fault
    (Xid 13, 31, 43) is that fault's consequence: a kernel that faulted or hung keeps its channel
    from switching out. It then competes as a specific error, so the earlier fault decides; on a GPU
    with no such fault, Xid 109 stays hardware evidence."""
    faulted: set[str] = set()
    out: list[tuple[Rank, int, anomalies.Evidence]] = []
    for rank_class, index, e in sorted(ranked, key=lambda item: (item[2].line, item[1])):
        pci = _XID_PCI.search(e.text)
        strength = rank_class
        if pci and e.xid in _APPLICATION_XIDS:
            faulted.add(pci.group(1).lower())
        elif pci and e.xid in _CONSEQUENCE_XIDS and rank_class == Rank.HARDWARE and pci.group(1).lower() in faulted:
            strength = Rank.SPECIFIC
        out.append((strength, index, e))
    return sorted(out, key=lambda item: item[1])


_LEADING_LABELS = re.compile(r"^(?:\s{0,6}\d{1,6}: |\[(?:rank|default)\d{1,6}\]:\s?)+")
_DIGITS = re.compile(r"\d+")


def _truncated_cascade(
    ranked: list[tuple[Rank, int, anomalies.Evidence]],
) -> list[tuple[Rank, int, anomalies.Evidence]]:
    """A line cut short (its writer killed mid-line, a capped log line) can lose the words that mark
    it as a cascade: ``DistBackendError: NCCL error in: P`` is what is left of a peer's ``... remote
    process exited ...``. A broad-category line whose text, without its rank label and with numbers
    blurred, begins another line that is a cascade symptom is that symptom, cut: a cascade too."""
    bodies = sorted({_shape(e.text) for rank_class, _, e in ranked if rank_class == Rank.CASCADE})
    if not bodies:
        return ranked

    def cut_cascade(item: anomalies.Evidence) -> bool:
        body = _shape(item.text)
        at = bisect.bisect_left(bodies, body)
        return at < len(bodies) and bodies[at].startswith(body) and bodies[at] != body

    return [
        (Rank.CASCADE, index, e) if rank_class == Rank.SPECIFIC and e.category in TEXT_DECIDES and cut_cascade(e)
        else (rank_class, index, e)
        for rank_class, index, e in ranked
    ]


def _shape(text: str) -> str:
    return _DIGITS.sub("0", _LEADING_LABELS.sub("", text, count=1))


def _reason_text(text: str) -> str:
    m = _WRAPPED_REASON.search(text)
    return text[m.end() :] if m else text


def _cascade_order(item: tuple[Rank, int, anomalies.Evidence]) -> int:
    """Among cascade symptoms the NCCL timeout comes first: the aborts around it are its consequence."""
    return 0 if item[0] == Rank.CASCADE and item[2].category == C.NCCL_TIMEOUT else 1


def _hint(item: anomalies.Evidence, hints: Mapping[str, vocab.Attribution] | None) -> vocab.Attribution | None:
    return (hints or {}).get(item.pattern)


_WRAPPER_CATEGORIES = frozenset({C.PYTHON_EXCEPTION, C.NCCL_ERROR})
"""Categories of lines that wrap another error's text (a Python exception, an NCCL/watchdog report)."""

_OWN_CALL_FAILED = frozenset({"nccl.socket_connect_failed"})
"""Entries of a wrapper category that report a call of their own failing (NCCL's connect to a peer),
not another error's text: on a line that also reads as a peer's socket going away (``Call to connect
failed : Connection timed out``), the failed connect is the reading, not a wrapper of it."""

_NEXT_LINE_WRAPPERS = frozenset({"segfault.cpp_terminate"})
"""Catalog entries whose error is on the next line: ``terminate called after throwing an instance of
'X'`` is followed by ``what(): <the error>``; when that line is recognised, it decides."""


def _tie_break(item: anomalies.Evidence) -> tuple[int, int]:
    """On one line: a specific category before a generic one, a wrapped error before its wrapper,
    then fatal before error."""
    if item.category in _WRAPPER_CATEGORIES:
        specificity = 2
    elif item.category in GENERIC_CATEGORIES:
        specificity = 1
    else:
        specificity = 0
    return (specificity, 0 if item.severity == vocab.Severity.FATAL else 1)


def _collateral(root_cause: hosts.RootCause) -> bool:
    """SIGABRT (-6) is the NCCL watchdog's own abort, SIGTERM (-15) the agent tearing down peers:
    the rank the agent saw first then says nothing about who started it."""
    return root_cause.exitcode in (-6, -15)


def _add(items: list[str] | list[int], value: str | int) -> None:
    if value not in items:
        items.append(value)  # type: ignore[arg-type]


def _add_suspect(
    item: anomalies.Evidence, nodes: list[str], ranks: list[int], node_of: Callable[[int], str | None] | None
) -> None:
    if item.rank is not None:
        _add(ranks, item.rank)
    node = item.node
    if node is None and item.rank is not None and node_of is not None:
        node = node_of(item.rank)
    if node:
        _add(nodes, node)


def _lagging_ranks(ordered: Sequence[anomalies.Evidence], ranks_seen: Collection[int]) -> list[int]:
    """Ranks that started the hang: behind their peers' collective, or silent while peers time out.

    A rank stuck before a collective has completed fewer collectives than the rest: PyTorch >= 2.2
    prints that count (``last completed NCCL work: N``), older versions only the sequence number of
    the collective that timed out (``WorkNCCL(SeqNum=N, ...)``), which is lower on the rank behind
    too. The first measure is used when enough ranks print it, else the second; both are compared
    only within one process group. A rank that never prints a timeout while most peers do is the
    one the others wait for (Flight Recorder's "missing ranks"). All need a clear minority;
    otherwise nobody is named.
    """
    completed: dict[tuple[str, int], int] = {}
    seq_by_rank: dict[tuple[str, int], int] = {}
    for item in ordered:
        if item.category != C.NCCL_TIMEOUT or item.rank is None:
            continue
        if m := _LAST_COMPLETED.search(item.text):
            group = _PROCESS_GROUP.search(item.text)
            completed.setdefault((group.group(1) if group else "", item.rank), int(m.group(1)))
        if m := _SEQNUM.search(item.text):
            # The old wording rarely names the group; its numbers are compared as one group, as ever.
            seq_by_rank.setdefault(("", item.rank), int(m.group(1)))
    for measure in (completed, seq_by_rank):
        laggards = _behind(measure)
        if laggards:
            return laggards
    timed_out = {item.rank for item in ordered if item.category == C.NCCL_TIMEOUT and item.rank is not None}
    world = set(ranks_seen) | timed_out
    silent = sorted(world - timed_out)
    if len(timed_out) >= 3 and silent and len(silent) * 4 <= len(world):
        return silent
    return []


def _behind(progress: Mapping[tuple[str, int], int]) -> list[int]:
    """Ranks whose count is below the value a clear majority of their process group reports."""
    groups: dict[str, dict[int, int]] = {}
    for (group, rank), value in progress.items():
        groups.setdefault(group, {})[rank] = value
    laggards: set[int] = set()
    for by_rank in groups.values():
        if len(by_rank) < 3:
            continue
        common, count = Counter(by_rank.values()).most_common(1)[0]
        behind = {rank for rank, value in by_rank.items() if value < common}
        if behind and len(behind) * 2 < len(by_rank) and count * 2 > len(by_rank):
            laggards |= behind
    return sorted(laggards)
