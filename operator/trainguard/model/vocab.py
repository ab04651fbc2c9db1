"""Closed vocabularies of the product, as str-Enums.

The string values are contracts checked from outside (``trainguard detect --format
json``, ``trainguard audit``, the CRDs): never rename a value, only add.
"""

from __future__ import annotations

import enum


class Symptom(enum.StrEnum):
    """What the workload shows, before any attribution."""

    CRASH = "crash"
    HANG = "hang"
    STRAGGLER = "straggler"
    HEALTHY = "healthy"


class Category(enum.StrEnum):
    """Failure category: a closed vocabulary that ``trainguard detect --format json``, the audit log and
    the CRDs publish (docs/cli.md); renaming or removing a value breaks users' scripts and dashboards."""

    NCCL_TIMEOUT = "nccl_timeout"
    NCCL_ERROR = "nccl_error"
    NCCL_NETWORK_IB = "nccl_network_ib"
    CUDA_ILLEGAL_MEMORY = "cuda_illegal_memory"
    CUDA_ERROR_OTHER = "cuda_error_other"
    GPU_XID_HARDWARE = "gpu_xid_hardware"
    ECC_MEMORY = "ecc_memory"
    GPU_FALLEN_OFF_BUS = "gpu_fallen_off_bus"
    NVLINK = "nvlink"
    OOM_GPU = "oom_gpu"
    OOM_HOST_KILLED = "oom_host_killed"
    SEGFAULT = "segfault"
    BUS_ERROR_SHM = "bus_error_shm"
    PYTHON_EXCEPTION = "python_exception"
    DATALOADER_KILLED = "dataloader_killed"
    FILESYSTEM_IO = "filesystem_io"
    PROCESS_SIGNAL_KILLED = "process_signal_killed"
    RENDEZVOUS_FAILURE = "rendezvous_failure"
    THROUGHPUT_DROP = "throughput_drop"
    PROGRESS_STALLED = "progress_stalled"
    NONE = "none"


class Attribution(enum.StrEnum):
    """Where a failure comes from. ``none`` only for a healthy workload."""

    HARDWARE = "hardware"
    SYSTEM = "system"
    APPLICATION = "application"
    UNKNOWN = "unknown"
    NONE = "none"


class Severity(enum.StrEnum):
    """How much a single matching line means on its own.

    ``fatal``: the attempt is over when this prints. ``error``: a failure signature that
    usually accompanies one. ``warning``: evidence worth recording that does not by
    itself make a crash (e.g. an NCCL NET/IB warning that may be retried).
    ``info``: context only (e.g. the host/rank banner a later line refers to).
    """

    FATAL = "fatal"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Mode(enum.StrEnum):
    """Policy mode. Monitor records what it would do; Action does it."""

    MONITOR = "Monitor"
    ACTION = "Action"


class AdviceAction(enum.StrEnum):
    """The desired state an Advice asks of the scheduler for one attempt."""

    REQUEUE = "requeue"
    HOLD = "hold"
    STOP = "stop"
    NONE = "none"


class AuditKind(enum.StrEnum):
    """Kinds of audit records (``trainguard audit --format json``)."""

    ANOMALY = "anomaly"
    VERDICT = "verdict"
    ADVICE = "advice"
    ACTION = "action"
    OUTCOME = "outcome"
    WATCHDOG = "watchdog"


class Disposition(enum.StrEnum):
    """Where the reconciliation of one advice generation stands."""

    PENDING = "Pending"
    CONVERGED = "Converged"
    ABANDONED = "Abandoned"
    MONITORED = "Monitored"
    """Monitor mode: what would be done was recorded; the scheduler was not changed."""


class Decider(enum.StrEnum):
    """Who or what made a decision recorded in the audit log."""

    POLICY_ENGINE = "policy-engine"
    WATCHDOG = "watchdog"
    OPERATOR = "operator"
    EXTERNAL_ATTRIBUTION = "external-attribution"
