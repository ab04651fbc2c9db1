"""Engine settings: one explicit, frozen object passed down; no module globals.

Loaded in one place (the CLI / operator shell) from flags and environment. Its fingerprint is
written into every audit row so a record can be traced to the configuration that made it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, fields

from trainguard.model import limits


@dataclass(frozen=True)
class EngineSettings:
    """How often the engine looks, and the cluster-wide switch for Action mode."""

    discovery_interval_s: float = 1.0
    """Seconds between two listings of opted-in jobs (one ``squeue`` call each). 1 s keeps the
    scheduler's view fresh enough for a sub-3 s anomaly -> action latency at negligible load."""
    tail_interval_s: float = 0.25
    """Seconds between two reads of the jobs' output files (a stat and a read of new bytes).
    0.25 s bounds the line -> anomaly latency at about settle + 0.25 s."""
    sweep_interval_s: float = 5.0
    """Seconds between two watchdog sweeps for advice past its deadline."""
    position_save_interval_s: float = 5.0
    """Seconds between two routine saves of the read positions that moved (one transaction). A
    position is saved at once with each advice and at each attempt's start, and all of them when
    the engine stops; after a crash of the process, a restart re-reads at most these seconds of
    lines that held no decision (never fewer: positions never run ahead of detection). At 10,000
    workloads a save every tailing round was 4 large write transactions a second."""
    allow_action: bool = False
    """Cluster-wide switch: False forces Monitor mode whatever the policies say (the default:
    nothing is done until an operator turns this on *and* a policy says Action)."""
    max_backoff_s: float = 30.0
    """Longest wait between two rounds of a timer loop while they keep failing (an unreachable
    scheduler or database): rounds back off from their interval up to this, with jitter."""
    log_store_lag_s: float = 5.0
    """With a store a shipper fills as the output source (VictoriaLogs, Loki), how long a failed attempt
    with no error line yet is read on before it is judged on its exit state alone: rows reach the store
    a moment after they are written. Files and pod logs need no wait. 5 s is above a healthy shipper's and store's
    delay (about a second each) and short enough that the recovery is barely delayed."""
    finished_grace_s: float = 30.0
    """How long a finished job stays tracked after its outcome was recorded, so that a requeue
    issued just after it ended (by us or a person) is still followed as the same workload."""

    metrics_interval_s: float = 15.0
    """Seconds between two reads of the GPU metrics of running jobs (``--prometheus-url``): a
    hardware fault there is an anomaly even when the job's log is silent. 15 s is DCGM's usual
    scrape interval; reading faster sees nothing new."""
    journal_retention_s: float = 30 * 86400.0
    """How long signal-journal entries (``journal/``: each decision's inputs) are kept."""
    journal_max_bytes: int = 2_000_000
    """The signal journal's cap per workload, in payload characters: past it, the oldest snapshots
    and checkpoint/progress samples go first, then the oldest decisions (``store.journal``)."""

    max_actions_per_hour: int | None = 100
    """The cluster administrator's cap on scheduler operations in any rolling hour, above every policy's
    ``blastRadius.maxActionsPerHour`` (a policy can only be stricter); None: no cap. When a cap refuses an
    advice the latched breaker opens (``act.switch``)."""
    max_nodes_out: int | None = None
    """The administrator's cap on nodes out of service by us at once (drained with our reason); None: no cap."""
    max_nodes_out_share: float | None = 0.5
    """The administrator's cap on the share of the cluster, and of each partition, out of service by us at
    once (peer practice: 50 %); None: no cap."""

    def __post_init__(self) -> None:
        """Every number finite: an infinite interval never polls again and a NaN compares false with
        everything, so a loop or a limit would silently stop working (the shell reports it; this is the
        last line of defence for any other caller)."""
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{field.name}: expected a finite number, got {value}")

    def admin_caps(self) -> limits.AdminCaps:
        """The administrator's caps for ``policy.blast_radius``."""
        return limits.AdminCaps(actions_per_hour=self.max_actions_per_hour, nodes_out=self.max_nodes_out,
                                nodes_out_share=self.max_nodes_out_share)

    def fingerprint(self) -> str:
        """A short stable hash of these settings, written into every audit row."""
        blob = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]
