"""Who printed a line: node and rank from the prefixes launchers and libraries put on log lines.

Place in the loop: ``detect.stream`` and ``detect.static`` call ``parse_prefix`` on every clean
line before matching, so evidence carries the node/rank that printed it; ``detect.first_cause``
then names only the node/rank of the initiating event. ``RankMap`` turns a global rank into a
node (Slurm's default block distribution, refined by host<->rank pairs the log itself shows).

Prefixes understood (they can stack, e.g. pdsh ``node3: [rank5]: node3:123:140 [1] NCCL ...``):

* ``srun --label``: ``3: text`` (task id = global rank when one task per GPU);
* torchrun ``--tee``/``--log-line-prefix``: ``[rank3]:`` and ``[default3]:``;
* NCCL: ``node12:3456:3470 [2] NCCL INFO ...`` = host:pid:tid [local rank];
* pdsh/clush: ``node3: text`` (only names with a digit, to keep ``RuntimeError:`` out), and
  ``10.0.0.7: text`` (DeepSpeed's pdsh launcher names hosts as its hostfile does, often by IPv4);
* syslog/kern.log: ``Nov 29 12:00:01 node3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, ...``;
* srun/slurmstepd summaries: ``srun: error: node2: task 1: Killed``, ``*** STEP 1.0 ON node2 ...``;
* c10d: ``[Rank 3]`` (``[PG 0 ... Rank 3]`` from PyTorch 2.2) inside ProcessGroupNCCL messages.

The multi-line ``Root Cause (first observed failure)`` block of torch elastic's
``ChildFailedError`` summary is read by ``RootCauseReader``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Prefix:
    """What a line's prefixes say about who printed it. ``None`` when the line does not say."""

    node: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    pci: str | None = None
    pid: int | None = None


_SRUN_LABEL = re.compile(r"^\s{0,6}(\d{1,6}): ")
_TORCHRUN = re.compile(r"^\[(?:rank|default)(\d{1,6})\]:\s?")
_NCCL = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,62}):(\d{1,9}):(\d{1,9}) \[(\d{1,3})\] ")
# pdsh/clush host prefix; a digit in the name keeps "RuntimeError: ..." and "srun: ..." out.
_PDSH = re.compile(r"^([A-Za-z][A-Za-z0-9_.-]{0,62}): ")
_PDSH_IPV4 = re.compile(r"^((?:\d{1,3}\.){3}\d{1,3}): ")
_SYSLOG = re.compile(
    r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*) ([A-Za-z0-9][A-Za-z0-9_.-]{0,62}) "
    r"(?:kernel|nvidia-persistenced|nv-hostengine|slurmd|kubelet)\S*: "
)
_PCI = re.compile(r"\(PCI:([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})")
_SRUN_TASK = re.compile(r"srun: error: ([A-Za-z0-9][A-Za-z0-9_.-]{0,62}): tasks? (\d{1,6})(?:-\d+)?: ")
_STEP_ON = re.compile(r"\*\*\* (?:STEP|JOB) [\d.]+ ON ([A-Za-z0-9][A-Za-z0-9_.-]{0,62}) ")
# c10d's own ``[Rank 3]``, and from PyTorch 2.2 ``[PG 0 Rank 3]``, ``[PG 0 (default_pg) Rank 3]``,
# ``[PG ID 0 PG GUID 0(default_pg) Rank 3]``. Only the default group (0) counts: in any other process
# group the number is the rank inside that group, not the global rank.
_C10D_RANK = re.compile(r"\[(?:PG (?:ID )?0 (?:[^\[\]]*? )?)?Rank (\d{1,6})\]")
_NCCL_COMM_RANK = re.compile(r"NCCL INFO .*\brank (\d{1,6}) nranks \d+")
_TIMESTAMPISH = re.compile(r"^\d")
_NOT_HOSTS = frozenset({"srun", "slurmstepd", "sbatch", "salloc", "kernel", "nvrm", "nccl"})


def parse_prefix(text: str) -> Prefix:
    """Strip known prefixes from the start of ``text`` and collect node/rank/pci/pid."""
    node: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    pid: int | None = None
    rest = text
    for _ in range(4):  # prefixes stack, but never deeply
        if m := _SRUN_LABEL.match(rest):
            rank = int(m.group(1)) if rank is None else rank
        elif m := _TORCHRUN.match(rest):
            rank = int(m.group(1))
        elif m := _NCCL.match(rest):
            node, pid, local_rank = m.group(1), int(m.group(2)), int(m.group(4))
        elif m := _SYSLOG.match(rest):
            node = m.group(1)
        elif (m := _PDSH_IPV4.match(rest)) or ((m := _PDSH.match(rest)) and _looks_like_host(m.group(1))):
            node = m.group(1) if node is None else node
        else:
            break
        rest = rest[m.end() :]
    # Each search below runs only when the literal text it needs is in the line (most lines
    # have none of them, and ``in`` is far cheaper than a regex search).
    if "srun: error: " in text and (m := _SRUN_TASK.search(text)):
        node, rank = m.group(1), int(m.group(2))
    elif "*** " in text and (m := _STEP_ON.search(text)):
        node = node or m.group(1)
    if rank is None and "Rank " in text and (m := _C10D_RANK.search(text)):
        rank = int(m.group(1))
    if node is not None and "NCCL INFO " in rest and (m := _NCCL_COMM_RANK.search(rest)):
        rank = int(m.group(1))  # "comm 0x... rank 5 nranks 16 ..." names the global rank itself
    pci_match = _PCI.search(text) if "PCI:" in text else None
    return Prefix(node=node, rank=rank, local_rank=local_rank, pci=pci_match.group(1) if pci_match else None, pid=pid)


def _looks_like_host(name: str) -> bool:
    return (
        any(ch.isdigit() for ch in name)
        and name.lower() not in _NOT_HOSTS
        and not _TIMESTAMPISH.match(name)
        and not name.endswith(("Error", "Exception", "Warning"))
    )


class RankMap:
    """Global rank -> node, for naming the node behind a rank that a log line mentions.

    Seeded with the job's node list and tasks per node, it assumes Slurm's default block
    distribution (ranks 0..t-1 on the first node, and so on; see ``srun --distribution``).
    Pairs the log itself shows (NCCL banners under a rank prefix, ``srun: error: node2: task 1``,
    the elastic Root Cause block) are learned and take precedence over the assumption.
    """

    def __init__(self, nodes: Sequence[str] = (), tasks_per_node: int | None = None) -> None:
        if tasks_per_node is not None and tasks_per_node < 1:
            raise ValueError(f"tasks_per_node must be >= 1, got {tasks_per_node}")
        self._nodes = list(nodes)
        self._tasks_per_node = tasks_per_node
        self._learned: dict[int, str] = {}

    def learn(self, node: str, rank: int) -> None:
        """Record that ``rank`` ran on ``node`` (the log showed it)."""
        self._learned[rank] = node

    def observe(self, prefix: Prefix) -> None:
        """Learn from one parsed line: a node with a global rank, or a node with a local rank."""
        if prefix.node is None:
            return
        if prefix.rank is not None:
            self.learn(prefix.node, prefix.rank)
        elif prefix.local_rank is not None and self._tasks_per_node and prefix.node in self._nodes:
            rank = self._nodes.index(prefix.node) * self._tasks_per_node + prefix.local_rank
            self._learned.setdefault(rank, prefix.node)

    def node_of(self, rank: int) -> str | None:
        """The node that ran ``rank``, or None if neither the log nor the job layout says."""
        if rank in self._learned:
            return self._learned[rank]
        if self._tasks_per_node and self._nodes:
            index = rank // self._tasks_per_node
            if 0 <= index < len(self._nodes):
                return self._nodes[index]
        return None

    def ranks_of(self, node: str) -> list[int]:
        """Ranks known (learned or laid out) to have run on ``node``, ascending."""
        ranks = {rank for rank, where in self._learned.items() if where == node}
        if self._tasks_per_node and node in self._nodes:
            start = self._nodes.index(node) * self._tasks_per_node
            ranks.update(r for r in range(start, start + self._tasks_per_node) if r not in self._learned)
        return sorted(ranks)


@dataclass(frozen=True, slots=True)
class RootCause:
    """torch elastic's ``Root Cause (first observed failure)``: who failed first, as the agent saw it."""

    lineno: int
    host: str | None = None
    rank: int | None = None
    exitcode: int | None = None
    text: str = ""


_ROOT_START = re.compile(r"Root Cause \(first observed failure\)")
_ROOT_FIELD = re.compile(r"^\s*(?:\[\d+\]:\s*)?(host|rank|exitcode|time|error_file|traceback)\s*:\s*(.*?)\s*$")
_LEADING_INT = re.compile(r"^(-?\d+)")


class RootCauseReader:
    """Reads the fields of the Root Cause block that follows ``ChildFailedError``.

    Feed every (prefix-stripped) line; ``feed`` returns the block once its fields are read.
    The block looks like::

        Root Cause (first observed failure):
        [0]:
          time      : 2024-05-01_12:00:00
          host      : node3
          rank      : 5 (local_rank: 1)
          exitcode  : -6 (pid: 1234)
    """

    _WINDOW = 12
    """Lines after the header within which the fields are looked for."""

    def __init__(self) -> None:
        self._start: int | None = None
        self._fields: dict[str, str] = {}

    @property
    def active(self) -> bool:
        """True inside a block: ``feed`` then needs every line, not only the block's header."""
        return self._start is not None

    def feed(self, lineno: int, text: str) -> RootCause | None:
        if _ROOT_START.search(text):
            self._start, self._fields = lineno, {}
            return None
        if self._start is None:
            return None
        if m := _ROOT_FIELD.match(_strip_rank_label(text)):
            self._fields[m.group(1)] = m.group(2)
        done = "exitcode" in self._fields and "host" in self._fields and "rank" in self._fields
        if done or lineno - self._start > self._WINDOW:
            found = self._finish()
            return found
        return None

    def _finish(self) -> RootCause | None:
        if self._start is None or not self._fields:
            self._start = None
            return None
        rank_m = _LEADING_INT.match(self._fields.get("rank", ""))
        exit_m = _LEADING_INT.match(self._fields.get("exitcode", ""))
        found = RootCause(
            lineno=self._start,
            host=self._fields.get("host") or None,
            rank=int(rank_m.group(1)) if rank_m else None,
            exitcode=int(exit_m.group(1)) if exit_m else None,
            text="; ".join(f"{k}: {v}" for k, v in self._fields.items()),
        )
        self._start, self._fields = None, {}
        return found


def _strip_rank_label(text: str) -> str:
    m = _TORCHRUN.match(text) or _SRUN_LABEL.match(text)
    return text[m.end() :] if m else text
