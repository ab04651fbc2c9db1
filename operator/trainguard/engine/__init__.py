"""The engine: one loop that wires signals -> detect -> attribute -> policy -> store -> act.

Place: below the shells (``cli.run``, the standalone runner, and ``k8s.operator``, the Kubernetes
operator; both assemble it with ``engine.assemble``) and above every stage. It owns no scheduler- or
Kubernetes-specific logic: the scheduler is a ``schedulers.base.Scheduler``, the store an
``store.audit.AuditStore``.

Per opted-in job (a *workload*; identity of one run = (workload, attempt) where attempt is the
scheduler's restart count) it keeps a ``runtime.WorkloadRuntime``: the effective policy (the selected
RecoveryPolicy plus the job comment's overrides), one ``detect.stream.WorkloadDetector`` for
the current attempt, the job's output, and the policy ledger.

Three timers drive it: discovery (list opted-in jobs: ``tracking``), tailing (read new lines, feed and
tick the detectors: ``tailing``), and the watchdog sweep (``recovery``). Every anomaly goes through
attribution and the policy to an Advice (``decision``), which is recorded *before* the executor
touches the scheduler. Recovery of one workload runs as its own named task (``recovery.RecoveryRunner``)
so a slow scheduler call never stalls detection elsewhere. With ``--prometheus-url``, a fourth timer
reads the GPU metrics of running jobs (a hardware fault there is an anomaly), and every verdict weighs
GPU metrics and the scheduler's node state (``evidence``); a crash the log cannot attribute waits for
the metrics in its task.

The modules, top down (``.importlinter`` checks that none imports one above it): ``assemble``; the
facade ``core`` (wiring, run/abort, the table of timers); ``tracking``; ``tailing``; ``decision``;
``recovery``; ``policies``, ``restore``, ``placement``, ``evidence``, ``theirs``, ``timers``; ``runtime``.
"""

from trainguard.engine.core import Engine
from trainguard.engine.runtime import Listener, WorkloadRuntime

__all__ = ["Engine", "Listener", "WorkloadRuntime"]
