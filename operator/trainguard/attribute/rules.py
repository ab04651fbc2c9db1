"""Built-in attribution: an Anomaly becomes a Verdict (hardware / system / application / unknown).

Place in the loop: after the detectors (``detect.*`` -> Anomaly), before the policy
(``policy.decide`` reads the Verdict). ``attribute.external`` may replace this verdict with an
external service's answer and falls back to it on any failure, so these rules must stand alone.
Pure: the engine passes the lemon history, the time and the job's nodes.

How a verdict is reached, in order (each step adds a human-readable reason):

1. Cascade: an anomaly whose evidence is only NCCL timeouts names victims, not a cause. It is
   ``unknown``; its suspects are kept only if the detector's cascade analysis named the rank
   that lagged or stayed silent (``detect.first_cause``), never the ranks that printed timeouts.
   If other evidence is present, the earliest non-timeout line is the first cause.
2. Rules that know better than a catalog hint: a hardware Xid anywhere in the evidence means
   hardware; Xids that are usually the program's fault (13, 31, 43) mean application;
   out-of-memory and Python exceptions are application.
3. Otherwise the detector's ``attribution_hint`` (the catalog's hint for the first cause), and
   if it gives none, ``CATEGORY_ATTRIBUTION``.
4. Lemon nodes (``attribute.lemon``): a suspect implicated in >= threshold incidents within the
   window raises the confidence; for an ``unknown`` verdict, a lemon among the job's nodes
   becomes a suspect even if the evidence does not name it.
5. Allocation (``attribute.allocation``), when the caller passes it: only nodes the scheduler
   placed one of the workload's attempts on can be suspects or lemons; any other host name the
   log gives stays evidence text and is listed in ``outside_allocation``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from trainguard.attribute import allocation as alloc
from trainguard.attribute import lemon
from trainguard.model import anomalies, verdicts, vocab

C = vocab.Category
A = vocab.Attribution

CATEGORY_ATTRIBUTION: Mapping[vocab.Category, vocab.Attribution] = {
    C.GPU_XID_HARDWARE: A.HARDWARE,
    C.ECC_MEMORY: A.HARDWARE,
    C.GPU_FALLEN_OFF_BUS: A.HARDWARE,
    C.NVLINK: A.HARDWARE,
    C.NCCL_NETWORK_IB: A.HARDWARE,
    C.NCCL_ERROR: A.SYSTEM,  # NCCL's own classes: ncclSystemError "a call to the system failed" (socket, malloc, a
    # library); the catalog's per-pattern hints decide first (e.g. nccl.socket_stack_mismatch, system; CUDA inside
    # NCCL, unknown), so this table is the fallback for NCCL text no pattern refines
    C.FILESYSTEM_IO: A.SYSTEM,
    C.RENDEZVOUS_FAILURE: A.SYSTEM,
    C.BUS_ERROR_SHM: A.SYSTEM,
    C.PYTHON_EXCEPTION: A.APPLICATION,
    C.OOM_GPU: A.APPLICATION,
    C.OOM_HOST_KILLED: A.APPLICATION,
    C.CUDA_ILLEGAL_MEMORY: A.APPLICATION,
    C.DATALOADER_KILLED: A.APPLICATION,
    C.CUDA_ERROR_OTHER: A.UNKNOWN,
    C.SEGFAULT: A.UNKNOWN,
    C.PROCESS_SIGNAL_KILLED: A.UNKNOWN,
    C.NCCL_TIMEOUT: A.UNKNOWN,
    C.PROGRESS_STALLED: A.UNKNOWN,
    C.THROUGHPUT_DROP: A.UNKNOWN,
    C.NONE: A.NONE,
}
"""Fallback when the anomaly carries no hint. Table, not code, so it can be reviewed at a glance."""

ALWAYS_APPLICATION = frozenset({C.OOM_GPU, C.OOM_HOST_KILLED, C.PYTHON_EXCEPTION, C.DATALOADER_KILLED})
"""The program asked for too much or raised: a retry on other nodes fails the same way.

Host OOM (confidence ``CONFIDENCE_RULE``): the kernel's OOM killer chooses the process with the
highest badness, i.e. the largest memory use (Linux kernel documentation, filesystems/proc.rst,
``/proc/<pid>/oom_score``; mm/oom_kill.c ``oom_badness``), so the training process it kills is the
one that grew. Live, the engine names it from the kill itself; the offline ``trainguard detect``
is stricter and says ``application`` only when the log also shows the process's own memory growing
(``detect/refine.py``), because a pasted bare ``Killed`` may also be a person's ``kill -9``."""

HARDWARE_XIDS = frozenset({48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 121, 140, 143, 154})
"""Xids NVIDIA documents as hardware/driver-recovery events (DBE ECC, row remap, NVLink, fallen off
the bus, GSP errors, recovery action); https://docs.nvidia.com/deploy/xid-errors/."""

APPLICATION_XIDS = frozenset({13, 31, 43, 45})
"""Xids that are usually the program's fault (graphics exception, MMU fault, GPU stopped on the
program's error, cleanup after another Xid)."""

TIMEOUT_CATEGORIES = frozenset({C.NCCL_TIMEOUT, C.NONE})
"""Evidence that only says "I was waiting" (or is context); cascades consist of these."""

CONFIDENCE_XID = 0.9
CONFIDENCE_RULE = 0.75
CONFIDENCE_HINT = 0.7
CONFIDENCE_TABLE = 0.6
CONFIDENCE_UNKNOWN = 0.3
CONFIDENCE_CASCADE_NAMED = 0.4
CONFIDENCE_CASCADE = 0.2
LEMON_BONUS = 0.15
CONFIDENCE_CAP = 0.95


def attribute(
    anomaly: anomalies.Anomaly,
    *,
    node_history: lemon.NodeHistory,
    lemon_rule: lemon.LemonRule,
    now: float,
    workload: str = "",
    attempt: int = 0,
    job_nodes: Sequence[str] = (),
    allocation: Collection[str] | None = None,
) -> verdicts.Verdict:
    """The built-in verdict for ``anomaly`` of (``workload``, ``attempt``), which ran on ``job_nodes``.

    ``allocation`` is every node the scheduler placed an attempt of the workload on; None (offline
    ``detect``, no scheduler) leaves the log's host names unchecked.
    """
    if anomaly.symptom == vocab.Symptom.HEALTHY or (anomaly.category == C.NONE and not anomaly.evidence):
        return verdicts.Verdict(
            attribution=A.NONE, category=C.NONE, confidence=1.0, reasons=["no anomaly: the workload is healthy"]
        )
    reasons: list[str] = []
    category, attribution, confidence, nodes, ranks = _classify(anomaly, reasons)
    if allocation is not None:
        nodes, _ = alloc.split(nodes, allocation)
        job_nodes = [node for node in job_nodes if node in allocation]

    lemons: list[str] = []
    for node in dict.fromkeys([*nodes, *job_nodes]):
        suspect = node in nodes
        past = node_history.incidents(
            node, now=now, window_s=lemon_rule.window_s, exclude=(workload, attempt) if workload else None
        )
        incidents = past + (1 if suspect else 0)
        if incidents < lemon_rule.threshold:
            continue
        if not suspect and attribution != A.UNKNOWN:
            continue
        jobs = node_history.workloads(node, now=now, window_s=lemon_rule.window_s)
        window = _days(lemon_rule.window_s)
        if suspect:
            reasons.append(f"{node} is a lemon: implicated in {incidents} incidents ({jobs} workloads) in {window}")
        else:
            nodes.append(node)
            reasons.append(
                f"{node} ran this job and is a lemon ({past} past incidents, {jobs} workloads, in {window}): "
                "suspect although the evidence does not name it"
            )
        lemons.append(node)
    if lemons:
        confidence = min(CONFIDENCE_CAP, confidence + LEMON_BONUS)

    verdict = verdicts.Verdict(
        attribution=attribution,
        category=category,
        suspect_nodes=nodes,
        suspect_ranks=ranks,
        confidence=round(confidence, 3),
        source="builtin",
        reasons=reasons,
        lemon_nodes=lemons,
    )
    return verdict if allocation is None else alloc.confine_verdict(verdict, anomaly, allocation)


def _classify(
    anomaly: anomalies.Anomaly, reasons: list[str]
) -> tuple[vocab.Category, vocab.Attribution, float, list[str], list[int]]:
    """Category, attribution, confidence and suspects before lemon memory."""
    nodes = list(dict.fromkeys(anomaly.suspect_nodes))
    ranks = list(dict.fromkeys(anomaly.suspect_ranks))
    category = anomaly.category
    causes = [item for item in anomaly.evidence if item.category not in TIMEOUT_CATEGORIES]

    hardware_xids = [item for item in anomaly.evidence if item.xid in HARDWARE_XIDS]
    if hardware_xids:
        for item in hardware_xids:
            if item.node and item.node not in nodes:
                nodes.append(item.node)
        xids = sorted({item.xid for item in hardware_xids if item.xid is not None})
        where = ", ".join(sorted({item.node for item in hardware_xids if item.node})) or "unknown node"
        reasons.append(f"hardware Xid {', '.join(map(str, xids))} on {where} (NVIDIA: hardware/recovery event)")
        if category in TIMEOUT_CATEGORIES or CATEGORY_ATTRIBUTION.get(category) != A.HARDWARE:
            category = C.GPU_XID_HARDWARE
        return category, A.HARDWARE, CONFIDENCE_XID, nodes, ranks

    if category in TIMEOUT_CATEGORIES and not causes:
        if nodes or ranks:
            named = ", ".join([*nodes, *(f"rank {rank}" for rank in ranks)])
            reasons.append(
                f"only NCCL timeouts (a cascade): cause unknown; {named} lagged or stayed silent while peers "
                "timed out, so it is the likely initiator"
            )
            return C.NCCL_TIMEOUT, A.UNKNOWN, CONFIDENCE_CASCADE_NAMED, nodes, ranks
        victims = sorted({item.node for item in anomaly.evidence if item.node})
        tail = f"; the nodes that printed them ({', '.join(victims)}) are victims, not suspects" if victims else ""
        reasons.append(f"only NCCL timeouts (a cascade) and no initiating event{tail}")
        return C.NCCL_TIMEOUT, A.UNKNOWN, CONFIDENCE_CASCADE, [], []

    if category in TIMEOUT_CATEGORIES and causes:
        first = min(causes, key=lambda item: (item.at if item.at is not None else float("inf"), item.line))
        category = first.category
        nodes = [first.node] if first.node else []
        ranks = [first.rank] if first.rank is not None else []
        reasons.append(f"first cause under the timeouts: {category} (pattern {first.pattern}, line {first.line})")
        attribution = CATEGORY_ATTRIBUTION.get(category, A.UNKNOWN)
        return category, attribution, CONFIDENCE_TABLE, nodes, ranks

    seen_xids = {item.xid for item in anomaly.evidence if item.xid is not None}
    if category == C.GPU_XID_HARDWARE and seen_xids and seen_xids <= APPLICATION_XIDS:
        reasons.append(f"Xid {', '.join(map(str, sorted(seen_xids)))} is usually the program's fault, not the GPU's")
        return category, A.APPLICATION, CONFIDENCE_TABLE, nodes, ranks

    if category in ALWAYS_APPLICATION:
        reasons.append(f"{category}: the program failed (retrying elsewhere fails the same way)")
        return category, A.APPLICATION, CONFIDENCE_RULE, nodes, ranks

    hint = anomaly.attribution_hint
    if hint not in (A.UNKNOWN, A.NONE):
        reasons.append(f"{category}: detector's first-cause hint is {hint}")
        return category, hint, CONFIDENCE_HINT, nodes, ranks

    attribution = CATEGORY_ATTRIBUTION.get(category, A.UNKNOWN)
    if attribution == A.NONE:
        attribution = A.UNKNOWN
    if attribution == A.UNKNOWN:
        reasons.append(
            _straggler_reason(nodes, ranks) if category == C.THROUGHPUT_DROP else f"{category}: no rule attributes it"
        )
        return category, A.UNKNOWN, CONFIDENCE_UNKNOWN, nodes, ranks
    reasons.append(f"{category}: built-in table says {attribution}")
    return category, attribution, CONFIDENCE_TABLE, nodes, ranks


def _straggler_reason(nodes: Sequence[str], ranks: Sequence[int]) -> str:
    """Who is behind a throughput drop, as far as the detector could tell, and why the cause stays
    unknown (a slow GPU, thermal throttling, a noisy neighbour or uneven data all look alike here)."""
    if nodes or ranks:
        who = ", ".join(f"rank {rank}" for rank in ranks) or "a rank"
        where = f" on {', '.join(nodes)}" if nodes else " (its node unknown)"
        return (
            f"throughput drop: {who}{where} fell behind (its own rate below its peers' or its earlier one); "
            "no rule attributes the cause"
        )
    return "throughput drop: no rank or node fell behind the others, so none is suspect; no rule attributes the cause"


def _days(seconds: float) -> str:
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{int(seconds // 86400)}d"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    return f"{seconds:g}s"
