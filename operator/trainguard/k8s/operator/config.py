"""What ``trainguard operator`` was started with (``OperatorConfig``), and the names of our API group.

Place: the settings of the operator shell, built by ``cli/operator.py`` from the one settings
definition (``cli/config.py``) and read by the other modules of this package: no module of the
shell reads the environment or a global for its configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from aiohttp import web

from trainguard import settings as settings_mod
from trainguard import shards as shards_mod
from trainguard.http import app as http_app
from trainguard.schedulers import tokens
from trainguard.signals import gpu_metrics as gpu_metrics_mod
from trainguard.signals import loki_book, victorialogs
from trainguard.store import database

GROUP: Final = "trainguard.dev"
VERSION: Final = "v1alpha1"
POLICIES: Final = "recoverypolicies"


@dataclass(frozen=True)
class OperatorConfig:
    """Everything ``trainguard operator`` was started with: one explicit object rather than globals or
    environment reads scattered through the handlers, so a test can build it and print it."""

    scheduler: str
    """Scheduler spec, as for ``trainguard run`` (slurm-local | slurm-ssh://... | slurm-rest://...), or
    ``kubernetes``: JobSets and PyTorchJobs annotated ``trainguard.dev/policy`` (``k8s/kubejobs``)."""
    namespaces: tuple[str, ...] = ()
    """Namespaces whose RecoveryPolicy/WorkloadRecovery objects are served; empty with clusterwide."""
    clusterwide: bool = False
    workload_namespace: str = "default"
    """Where WorkloadRecovery objects of Slurm jobs are created (the operator's own namespace)."""
    db_url: str = database.DEFAULT_DB_URL
    peering: str | None = None
    """None: standalone (one replica). A name: act only while holding the Lease of that name in
    ``workload_namespace`` (several replicas, one active; ``k8s/lease.py``)."""
    liveness_endpoint: str | None = None
    """kopf's own liveness endpoint (optional; the probes use ``http_listen``)."""
    http_listen: str = http_app.OFF
    """``HOST:PORT`` of /healthz, /readyz and /metrics (``trainguard.http``), or ``off``."""
    http_routes: tuple[web.RouteDef, ...] = ()
    """Further routes served on ``http_listen`` (the console's, passed by the CLI: the console is a
    sibling shell this module does not import)."""
    http_token_file: Path | None = None
    """Bearer tokens of the HTTP API (``http.auth``); other tokens are reviewed by Kubernetes
    (``k8s/review.py``: TokenReview + SubjectAccessReview on our CRDs)."""
    engine: settings_mod.EngineSettings = field(default_factory=settings_mod.EngineSettings)
    """The engine's settings (the Action switch, the polling interval, the journal's retention and cap, the
    administrator's caps), built by ``cli.common.engine_settings`` exactly as ``trainguard run`` builds its
    engine's: every term's engine runs with them."""
    notify_config: Path | None = None
    """The notifications file (``--notify-config``, docs/notifications.md); None sends nothing."""
    status_interval_s: float = 2.0
    """Seconds between two reconcile rounds of WorkloadRecovery objects (each round lists them once)."""
    retention_s: float = 3600.0
    """How long a WorkloadRecovery stays after the engine stopped tracking its job, so the outcome
    stays visible (``kubectl get recoveries``) before it is garbage-collected."""
    jwt: str | tokens.TokenSource | None = None
    scheduler_env: dict[str, str] | None = None
    """Environment of the Slurm client commands (default: this process's)."""
    rest_fallback: str = "slurm-local"
    patterns_files: tuple[Path, ...] = ()
    node_pool_label: str = "trainguard.dev/node-pool"
    """The Kubernetes node label whose value is a node's pool: pools stand in for partitions in the
    blast-radius limits (``k8s/kubejobs/nodes.pool_of``); nodes without it form one pool."""
    slinky_namespace: str | None = None
    """Namespace of a Slinky cluster's slurmd pods; when set, the Slurm scheduler is wrapped in
    ``k8s.slinky_nodes.SlinkyScheduler``: a lemon node is taken out of service by the executor as a
    cordon of its Kubernetes node (policy allows ``drainNode`` or ``cordonNode``), like any drain."""
    victorialogs: victorialogs.Config | None = None
    """Read job output from this VictoriaLogs server instead of the output files (``signals.sources``)."""
    loki: loki_book.Config | None = None
    """Read job output from this Loki instead of the output files (not together with ``victorialogs``)."""
    gpu_metrics: gpu_metrics_mod.GpuMetricsConfig | None = None
    """DCGM evidence from Prometheus/VictoriaMetrics (``--prometheus-url``); None: not configured."""
    shards: int = 1
    """> 1: every replica runs the engine on the shards whose Kubernetes Leases it holds
    (``k8s/shard_leases.py``, docs/sharding.md); not together with ``peering``."""
    shard_key: shards_mod.ShardKey = "cluster"
    replica_id: str = ""

