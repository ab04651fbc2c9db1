"""The kopf operator shell: ``trainguard operator`` runs the engine inside a Kubernetes operator.

Place in the loop: the outermost shell, beside ``cli/run.py`` (standalone). It wires the same engine
(scheduler adapter, audit store, policies, catalog) and adds the Kubernetes surface:

- RecoveryPolicy objects are watched (``on.event``: no finalizers, no annotations written on them),
  validated by ``k8s/policies.py``, and the accepted ones hot-swapped into the engine; each gets an
  Accepted/Invalid condition with observedGeneration;
- one WorkloadRecovery per discovered opted-in workload is created, its status kept as a projection
  of the engine (``k8s/status.py``) and written by the status coalescer (``k8s/coalesce.py``: the
  latest state per object at a bounded rate, an advice or outcome within a short settle time): each
  audit record marks its workload, and a reconcile loop (level-triggered, every
  ``status_interval_s`` and at once when woken) marks every object whose status differs; an object
  is garbage-collected ``retention_s`` after the engine stopped tracking the workload;
- ``spec.overrides`` of a WorkloadRecovery apply to its workload (``mode: Monitor`` forces Monitor; the
  budgets and the hang timeout become per-workload overrides in the engine);
- RecoveryPolicy name clashes across namespaces are resolved by one rule (``k8s/policies.py``);
- Events for anomalies, verdicts, advice and outcomes (``k8s/events.py``).

The cluster-wide Action switch (``allow_action``) sits on top of every policy's mode. One instance
acts: standalone (one replica, Recreate strategy), or, with ``peering``, only the replica holding a
coordination.k8s.io Lease runs the engine and the reconcile loop (``k8s/lease.py``); the others
keep watching and take over when the Lease expires. Each term claims a fencing token in the audit
store that every scheduler mutation carries, and a replica that loses the Lease cancels its
in-flight recoveries at once. The audit store stays the durable log; status and Events are the view.

The modules, one responsibility each: ``config`` (``OperatorConfig``), ``handlers`` (kopf's login,
handlers and settings), ``shell`` (the shared state, start and close), ``assembly`` (what the engine
is built from), ``terms`` (when this replica acts), ``recoveries`` (WorkloadRecovery objects and the
reconcile loop), ``reporting`` (records to Events, policy statuses) and ``entry`` (``run``, ``main``).
"""

from trainguard.k8s.operator.config import GROUP, POLICIES, VERSION, OperatorConfig
from trainguard.k8s.operator.entry import StartupError, main, run
from trainguard.k8s.operator.handlers import build_registry, configure, login
from trainguard.k8s.operator.reporting import REPORT_QUEUE, URGENT_KINDS
from trainguard.k8s.operator.shell import STARTUP_PATIENCE_S, Shell

__all__ = [
    "GROUP", "POLICIES", "REPORT_QUEUE", "STARTUP_PATIENCE_S", "URGENT_KINDS", "VERSION", "OperatorConfig", "Shell",
    "StartupError", "build_registry", "configure", "login", "main", "run",
]
