"""One settings definition for ``trainguard run`` and ``trainguard operator`` (and ``doctor``, ``scorecard``).

Every setting is read from, in this order of precedence:

1. its command-line flag (``--kebab-name``, or the contract's name: ``--db``, ``--poll``, ...);
2. its environment variable ``TRAINGUARD_<NAME>`` (a few also accept the conventional name:
   ``SLURM_JWT``, ``POD_NAMESPACE``);
3. the YAML config file (``--config FILE`` or ``TRAINGUARD_CONFIG``; keys are the setting names);
4. its default.

The flags are generated from the fields below, so a setting cannot exist without a flag and an
environment variable, and ``--print-config`` shows the effective value of each with where it
came from (secrets redacted). Helm values render into the environment or the config file.

Secrets (the database URL, the Slurm JWT) can come from a file (``--db-file`` /
``TRAINGUARD_DB_URL_FILE``, ``--jwt-file`` / ``TRAINGUARD_SLURM_JWT_FILE``, e.g. a mounted
Kubernetes Secret) or the environment, so they never need to be on a command line, where ``ps``
shows them to every user of the host.

This module says WHAT can be set; ``settings_io.py`` reads it (the config file, the flags, loading with
one-line errors, ``--print-config``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from trainguard.model import secrets
from trainguard.model.workloads import ShardKey
from trainguard.observe.notify import config as notify_file
from trainguard.schedulers import tokens
from trainguard.store import location

ENV_PREFIX: Final = "TRAINGUARD_"
DEFAULT_HTTP_LISTEN: Final = "127.0.0.1:8080"
REPLACED_ENV: Final = {
    "TRAINGUARD_ALLOW_ACTION": "TRAINGUARD_MODE=action",
    "TRAINGUARD_ACTIONS_ENABLED": "TRAINGUARD_MODE=action",
}
"""Former names of the cluster-wide Action switch: a start-up error, never silently ignored."""
READ_ELSEWHERE: Final = {
    "SLURM_CONF": "the Slurm client commands (slurm-local)",
    "KUBECONFIG": "the Kubernetes credentials (operator)",
    "POD_NAME": "the Lease holder identity (operator --peering)",
    "XDG_STATE_HOME": "the default audit database location",
}
"""Environment variables read by something other than these settings (shown by --print-config)."""

Mode = Literal["monitor", "action"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]
LogFormat = Literal["text", "json"]
PathList = Annotated[list[Path], NoDecode]
TextList = Annotated[list[str], NoDecode]


class ConfigError(Exception):
    """A configuration problem, reported in one line."""


def _flag(flag: str | None = None, *, metavar: str | None = None, short: str | None = None) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if flag:
        extra["flag"] = flag
    if metavar:
        extra["metavar"] = metavar
    if short:
        extra["short"] = short
    return extra


def _also(name: str, *env: str) -> AliasChoices:
    """The setting ``name`` is also read from the environment variables ``env`` (the first set wins)."""
    return AliasChoices(f"{ENV_PREFIX}{name.upper()}", *env, name)


class Settings(BaseSettings):
    """Settings shared by ``trainguard run`` and ``trainguard operator``."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True, populate_by_name=True,
                                      allow_inf_nan=False)  # TRAINGUARD_POLL=inf would never poll again

    config: Path | None = Field(None, description="YAML file of settings, keyed by the names --print-config shows "
                                "(read below flags and environment)", json_schema_extra=_flag(metavar="FILE"))
    scheduler: str | None = Field(None, description="slurm-local | slurm-ssh://USER@HOST[:PORT] | "
                                  "slurm-rest://HOST:PORT", json_schema_extra=_flag(metavar="SPEC"))
    mode: Mode = Field("monitor", description="the cluster-wide Action switch. 'monitor' records advice and changes "
                       "nothing; 'action' carries out the advice of policies whose mode is Action (two keys: the "
                       "built-in default policy is always Monitor)")
    db_url: SecretStr | None = Field(None, description="audit database URL (default: SQLite in --home); a URL "
                                     "with a password belongs in TRAINGUARD_DB_URL or --db-file, not here, where ps "
                                     "shows it", json_schema_extra=_flag("--db", metavar="URL"))
    db_url_file: Path | None = Field(None, description="file holding the audit database URL (e.g. a mounted Secret)",
                                     json_schema_extra=_flag("--db-file", metavar="FILE"))
    home: Path | None = Field(None, description="state folder; the default SQLite audit database is HOME/trainguard.db "
                              "(default: $XDG_STATE_HOME/trainguard or ~/.local/state/trainguard)",
                              json_schema_extra=_flag(metavar="DIR"))
    slurm_jwt: SecretStr | None = Field(None, validation_alias=_also("slurm_jwt", "SLURM_JWT"),
                                        description="slurmrestd / auth/jwt token; prefer $SLURM_JWT or --jwt-file: on "
                                        "the command line ps shows it",
                                        json_schema_extra=_flag("--jwt", metavar="TOKEN"))
    slurm_jwt_file: Path | None = Field(None, description="file holding the Slurm JWT (e.g. a mounted Secret)",
                                        json_schema_extra=_flag("--jwt-file", metavar="FILE"))
    rest_fallback: str = Field("slurm-local", description="CLI transport for what slurmrestd cannot do, e.g. "
                               "requeue ('none' to disable)", json_schema_extra=_flag(metavar="SPEC"))
    patterns_file: PathList = Field(default_factory=list, description="extra catalog patterns (YAML, catalog "
                                    "schema); repeatable, comma-separated in the environment",
                                    json_schema_extra=_flag(metavar="FILE"))
    poll: float = Field(1.0, gt=0, description="seconds between job listings",
                        json_schema_extra=_flag(metavar="SECONDS"))
    journal_retention_days: float = Field(30.0, gt=0, le=36500, description="days the signal journal (each decision's "
                                          "inputs, for `trainguard backtest`) keeps its entries",
                                          json_schema_extra=_flag(metavar="DAYS"))
    journal_max_bytes: int = Field(2_000_000, ge=10_000, description="signal-journal cap per workload (payload "
                                   "characters): past it, the oldest snapshots and progress samples go first, "
                                   "then the oldest decisions", json_schema_extra=_flag(metavar="N"))
    max_actions_per_hour: int | None = Field(100, ge=0, le=1_000_000, description="the cluster administrator's cap "
                                             "on scheduler operations in any rolling hour, above every policy's "
                                             "maxActionsPerHour (a policy can only be stricter); when a cap refuses "
                                             "an advice the breaker opens and stays open until `trainguard actions "
                                             "reset-breaker`; 'off': no cap", json_schema_extra=_flag(metavar="N"))
    max_nodes_out: int | None = Field(None, ge=0, le=1_000_000, description="the administrator's cap on nodes out "
                                      "of service by us at once (drained with our reason, or about to be); "
                                      "'off' (the default): no cap", json_schema_extra=_flag(metavar="N"))
    max_nodes_out_share: float | None = Field(0.5, ge=0.0, le=1.0, description="the administrator's cap on the "
                                              "share of the cluster, and of each partition, out of service by us at "
                                              "once, above every policy's maxDrainedShare; 'off': no cap",
                                              json_schema_extra=_flag(metavar="SHARE"))
    http_listen: str = Field(DEFAULT_HTTP_LISTEN, description="HOST:PORT of /healthz, /readyz and /metrics (port 0: "
                             "any free port, logged at start-up); 'off' disables them",
                             json_schema_extra=_flag(metavar="HOST:PORT"))
    http_token_file: Path | None = Field(None, description="bearer tokens for the HTTP API and console, one per "
                                         "line, each optionally followed by a space and a role 'read' or 'write' "
                                         "(default read); with it every path but /healthz and /readyz needs a token",
                                         json_schema_extra=_flag(metavar="FILE"))
    victorialogs_url: str | None = Field(None, description="VictoriaLogs base URL, e.g. http://vlogs:9428: job "
                                         "output is read from it instead of the output files",
                                         json_schema_extra=_flag(metavar="URL"))
    victorialogs_job_field: str = Field("job_id", description="VictoriaLogs field holding the scheduler's job id "
                                        "of a line", json_schema_extra=_flag(metavar="FIELD"))
    victorialogs_path_field: str = Field("filename", description="VictoriaLogs field holding the output file a "
                                         "line was read from (matched with the job's StdOut/StdErr)",
                                         json_schema_extra=_flag(metavar="FIELD"))
    victorialogs_host_field: str = Field("host", description="VictoriaLogs field holding the node a line came from "
                                         "(used for streams other than the job's shared output file)",
                                         json_schema_extra=_flag(metavar="FIELD"))
    victorialogs_rank_field: str = Field("rank", description="VictoriaLogs field holding the rank that printed a "
                                         "line, when the shipper knows it", json_schema_extra=_flag(metavar="FIELD"))
    loki_url: str | None = Field(None, description="Loki base URL, e.g. http://loki:3100: job output is read from "
                                 "it instead of the output files", json_schema_extra=_flag(metavar="URL"))
    loki_selector: str = Field("", description="extra LogQL label matchers for every Loki query, e.g. "
                               "'cluster=\"gpu-a\"' (the job label matcher is added per job)",
                               json_schema_extra=_flag(metavar="MATCHERS"))
    loki_job_label: str = Field("job_id", description="Loki stream label holding the scheduler's job id",
                                json_schema_extra=_flag(metavar="LABEL"))
    loki_path_label: str = Field("filename", description="Loki stream label holding the output file path "
                                 "(promtail's default)", json_schema_extra=_flag(metavar="LABEL"))
    loki_rank_label: str = Field("rank", description="Loki stream label holding the rank",
                                 json_schema_extra=_flag(metavar="LABEL"))
    loki_host_label: str = Field("host", description="Loki stream label holding the node name",
                                 json_schema_extra=_flag(metavar="LABEL"))
    loki_tenant: str | None = Field(None, description="Loki tenant, sent as X-Scope-OrgID (multi-tenant Loki)",
                                    json_schema_extra=_flag(metavar="ORG"))
    loki_token_file: Path | None = Field(None, description="file holding a bearer token for Loki (e.g. a "
                                         "mounted Secret)", json_schema_extra=_flag(metavar="FILE"))
    loki_username: str | None = Field(None, description="basic-auth user for Loki (password: --loki-password-file)",
                                      json_schema_extra=_flag(metavar="USER"))
    loki_password_file: Path | None = Field(None, description="file holding the basic-auth password for Loki",
                                            json_schema_extra=_flag(metavar="FILE"))
    prometheus_url: str | None = Field(None, description="Prometheus or VictoriaMetrics base URL: DCGM GPU "
                                       "counters become evidence", json_schema_extra=_flag(metavar="URL"))
    prometheus_hostname_label: str = Field("Hostname", description="label of the DCGM series that names the node "
                                           "(dcgm-exporter's default: Hostname)",
                                           json_schema_extra=_flag(metavar="LABEL"))
    prometheus_wait: float = Field(30.0, ge=0, le=600, description="seconds to wait for GPU metrics before "
                                   "deciding on a crash the log cannot attribute (a fault reaches Prometheus after "
                                   "DCGM's sampling and a scrape); 0 decides at once",
                                   json_schema_extra=_flag(metavar="SECONDS"))
    prometheus_node_regex: str | None = Field(None, description="regex over that label's value whose first group (or "
                                              "whole match) is the scheduler's node name (default: the value, or its "
                                              "part before the first dot)", json_schema_extra=_flag(metavar="REGEX"))
    shards: int = Field(1, ge=1, le=4096, description="split the workloads into N shards, each acted on by the "
                        "replica holding its lease (1: no sharding). Every replica must give the same --shards and "
                        "--shard-key and one shared audit database (docs/sharding.md)",
                        json_schema_extra=_flag(metavar="N"))
    shard_key: ShardKey = Field("cluster", description="what a workload's shard is derived from: its Slurm cluster, "
                                "its partition or its Kubernetes namespace")
    replica_id: str = Field("", max_length=200, description="this replica's name in the shard leases (default: "
                            "host name and process id); unique per live replica", json_schema_extra=_flag(metavar="ID"))
    notify_config: notify_file.ConfigFile | None = Field(
        None, description="YAML file of notification targets (Slack, PagerDuty, webhook; docs/notifications.md), "
        "checked at start", json_schema_extra=_flag(metavar="FILE"))
    log_level: LogLevel = "INFO"
    log_format: LogFormat = Field("text", description="log lines on stderr: 'text' for people, 'json' one object "
                                  "per line (time, level, logger, message, and workload, attempt, generation when "
                                  "the line is about one recovery) for a log shipper")

    COMMAND: ClassVar[str] = ""
    FLAGS: ClassVar[tuple[str, ...] | None] = None
    """The settings offered as flags by this command (None: all); the others are still read from the
    environment and the config file, so one file and one environment serve every command."""

    @field_validator("max_actions_per_hour", "max_nodes_out", "max_nodes_out_share", mode="before")
    @classmethod
    def _off(cls, value: Any) -> Any:
        """'off' (or 'none', or empty) turns an administrator's cap off."""
        return None if isinstance(value, str) and value.strip().lower() in ("off", "none", "") else value

    @field_validator("mode", "log_format", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("patterns_file", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return _split_list(value)

    @model_validator(mode="after")
    def _one_log_store(self) -> Settings:
        if self.victorialogs_url and self.loki_url:
            raise ValueError("give one log store: victorialogs_url (--victorialogs-url) or loki_url (--loki-url), "
                             "not both")
        if self.loki_token_file is not None and self.loki_username is not None:
            raise ValueError("give one Loki authentication: loki_token_file (bearer) or loki_username + "
                             "loki_password_file (basic), not both")
        return self

    @model_validator(mode="after")
    def _one_source_per_secret(self) -> Settings:
        if self.db_url is not None and self.db_url_file is not None:
            raise ValueError("give the database URL once: db_url (--db, TRAINGUARD_DB_URL) or db_url_file "
                             "(--db-file, TRAINGUARD_DB_URL_FILE), not both")
        if self.slurm_jwt is not None and self.slurm_jwt_file is not None:
            raise ValueError("give the Slurm JWT once: slurm_jwt (--jwt, SLURM_JWT, TRAINGUARD_SLURM_JWT) or "
                             "slurm_jwt_file (--jwt-file, TRAINGUARD_SLURM_JWT_FILE), not both")
        return self

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags (passed as init arguments) > environment > config file > defaults; no .env files."""
        path = None
        if isinstance(init_settings, InitSettingsSource):
            path = init_settings.init_kwargs.get("config")
        path = path or os.environ.get(f"{ENV_PREFIX}CONFIG")
        from trainguard.cli import settings_io  # it reads these classes: imported once they exist

        return init_settings, env_settings, settings_io.ConfigFileSource(settings_cls, Path(path) if path else None)

    # ------------------------------------------------------------------ effective values

    def database_url(self) -> str:
        """The audit database URL: --db / TRAINGUARD_DB_URL, else the file's content, else SQLite in home."""
        if self.db_url is not None:
            return self.db_url.get_secret_value()
        if self.db_url_file is not None:
            return _read_secret(self.db_url_file, "db_url_file")
        if self.home is not None:
            return f"sqlite+aiosqlite:///{self.home.expanduser() / 'trainguard.db'}"
        return location.DEFAULT_DB_URL

    def slurm_token(self) -> str | None:
        """The Slurm JWT, from the environment, the flag or the file; None when none is given."""
        if self.slurm_jwt is not None:
            return self.slurm_jwt.get_secret_value()
        if self.slurm_jwt_file is not None:
            return _read_secret(self.slurm_jwt_file, "slurm_jwt_file")
        return None

    def slurm_token_source(self) -> str | tokens.TokenSource | None:
        """What slurmrestd's requests carry: with a token file, the file itself, re-read whenever it
        changes (a rotated Secret), so an expiring JWT does not stop us until a restart."""
        if self.slurm_jwt_file is not None:
            try:
                return tokens.TokenFile(self.slurm_jwt_file)
            except ValueError as exc:
                raise ConfigError(f"slurm_jwt_file: {exc}") from exc
        return self.slurm_token()

    def loki_secrets(self) -> tuple[str | None, str | None]:
        """The Loki bearer token and basic-auth password, read from their files (None when not given)."""
        token = _read_secret(self.loki_token_file, "loki_token_file") if self.loki_token_file else None
        password = _read_secret(self.loki_password_file, "loki_password_file") if self.loki_password_file else None
        return token, password

    def scheduler_env(self) -> dict[str, str]:
        """Environment of the Slurm client commands: ours, with the JWT from a file (auth/jwt reads
        ``SLURM_JWT`` from the environment)."""
        env = dict(os.environ)
        token = self.slurm_token()
        if token:
            env["SLURM_JWT"] = token
        return env

    def effective(self) -> dict[str, Any]:
        """Values derived from several settings, for --print-config."""
        from trainguard.store import database

        return {"db": database.safe_url(self.database_url()), "action_switch": self.mode == "action",
                "slurm_jwt": "set" if self.slurm_token() else "not set"}


class RunSettings(Settings):
    """``trainguard run``: the standalone runner."""

    COMMAND: ClassVar[str] = "run"

    policy: PathList = Field(default_factory=list, description="RecoveryPolicy YAML file (repeatable; one or many "
                             "documents each; comma-separated in the environment)",
                             json_schema_extra=_flag(metavar="FILE"))
    ssh_key: PathList = Field(default_factory=list, description="SSH private key for slurm-ssh (repeatable)",
                              json_schema_extra=_flag(metavar="FILE"))
    known_hosts: Path | None = Field(None, description="SSH known_hosts file for slurm-ssh",
                                     json_schema_extra=_flag(metavar="FILE"))

    @field_validator("policy", "ssh_key", mode="before")
    @classmethod
    def _split_paths(cls, value: Any) -> Any:
        return _split_list(value)

    @model_validator(mode="after")
    def _needs_scheduler(self) -> RunSettings:
        if not self.scheduler:
            raise ValueError("scheduler: required (--scheduler SPEC or TRAINGUARD_SCHEDULER)")
        return self


class OperatorSettings(Settings):
    """``trainguard operator``: the recovery loop as a Kubernetes operator."""

    COMMAND: ClassVar[str] = "operator"

    scheduler: TextList = Field(  # type: ignore[assignment]  # repeatable here: one engine over several schedulers
        default_factory=lambda: ["slurm-local"],
        description="slurm-local | slurm-ssh://USER@HOST[:PORT] | slurm-rest://HOST:PORT (default: slurm-local, i.e. "
        "scontrol/squeue with $SLURM_CONF and the JWT) | kubernetes (JobSets and PyTorchJobs annotated "
        "trainguard.dev/policy); repeatable, e.g. --scheduler slurm-local --scheduler kubernetes "
        "(environment: comma-separated)",
        json_schema_extra=_flag(metavar="SPEC"))

    @field_validator("scheduler", mode="before")
    @classmethod
    def _split_schedulers(cls, value: Any) -> Any:
        return _split_list(value)

    namespace: TextList = Field(default_factory=list, description="namespace whose RecoveryPolicy/WorkloadRecovery "
                                "objects are served (repeatable; default: pod_namespace, else 'default')",
                                json_schema_extra=_flag(metavar="NS", short="-n"))
    all_namespaces: bool = Field(False, description="serve every namespace", json_schema_extra=_flag(short="-A"))
    workload_namespace: str | None = Field(None, description="where WorkloadRecovery objects of Slurm jobs are "
                                           "created (default: the first namespace, else pod_namespace, else "
                                           "'default')", json_schema_extra=_flag(metavar="NS"))
    pod_namespace: str | None = Field(None, validation_alias=_also("pod_namespace", "POD_NAMESPACE"),
                                      description="the operator's own namespace (the downward API's POD_NAMESPACE)",
                                      json_schema_extra=_flag(metavar="NS"))
    standalone: bool = Field(False, description="one instance, no peering (the default; deploy one replica with "
                             "strategy Recreate)")
    peering: str | None = Field(None, description="several replicas, one active: act only while holding the "
                                "coordination.k8s.io Lease NAME in the workload namespace (RBAC: docs/operator.md)",
                                json_schema_extra=_flag(metavar="NAME"))
    liveness: str | None = Field(None, description="also serve kopf's own liveness endpoint at this URL, e.g. "
                                 "http://0.0.0.0:8081/healthz (the probes use --http-listen)",
                                 json_schema_extra=_flag(metavar="URL"))
    status_interval: float = Field(2.0, gt=0, description="seconds between WorkloadRecovery reconcile rounds",
                                   json_schema_extra=_flag(metavar="SECONDS"))
    retention: float = Field(3600.0, gt=0, description="keep a WorkloadRecovery this long after its job is no "
                             "longer tracked", json_schema_extra=_flag(metavar="SECONDS"))
    node_pool_label: str = Field("trainguard.dev/node-pool", min_length=1, description="Kubernetes node label "
                                 "whose value is a node's pool: pools stand in for Slurm partitions in the limits "
                                 "(maxDrainedShare, --max-nodes-out-share); nodes without it form one pool",
                                 json_schema_extra=_flag(metavar="LABEL"))
    slinky_namespace: str | None = Field(None, description="namespace of a Slinky cluster's slurmd pods: a lemon node "
                                         "is taken out of service by cordoning its Kubernetes node, an executor step "
                                         "(policy allows drainNode or cordonNode); needs manifests/slinky",
                                         json_schema_extra=_flag(metavar="NS"))

    @field_validator("namespace", mode="before")
    @classmethod
    def _split_names(cls, value: Any) -> Any:
        return _split_list(value)

    @model_validator(mode="after")
    def _exclusive(self) -> OperatorSettings:
        if self.namespace and self.all_namespaces:
            raise ValueError("namespace and all_namespaces exclude each other")
        if self.standalone and self.peering:
            raise ValueError("standalone and peering exclude each other")
        return self

    def namespaces(self) -> tuple[str, ...]:
        """The served namespaces; empty with all_namespaces."""
        if self.all_namespaces:
            return ()
        return tuple(self.namespace) or (self.pod_namespace or "default",)

    def effective(self) -> dict[str, Any]:
        namespaces = self.namespaces()
        return {**super().effective(), "namespaces": list(namespaces) or "all",
                "workload_namespace": self.workload_namespace or (namespaces[0] if namespaces else None)
                or self.pod_namespace or "default"}


class DoctorSettings(Settings):
    """``trainguard doctor``: the settings of ``run`` (same flags, environment and config file), checked
    against the live endpoints instead of run. Nothing is required: what is not configured is reported."""

    COMMAND: ClassVar[str] = "doctor"

    policy: PathList = Field(default_factory=list, description="RecoveryPolicy YAML file to validate (repeatable; "
                             "comma-separated in the environment)", json_schema_extra=_flag(metavar="FILE"))
    ssh_key: PathList = Field(default_factory=list, description="SSH private key for slurm-ssh (repeatable)",
                              json_schema_extra=_flag(metavar="FILE"))
    known_hosts: Path | None = Field(None, description="SSH known_hosts file for slurm-ssh",
                                     json_schema_extra=_flag(metavar="FILE"))
    check_timeout: float = Field(10.0, gt=0, description="seconds one check may take before it is reported as "
                                 "failed", json_schema_extra=_flag(metavar="SECONDS"))
    slinky_namespace: str | None = Field(None, description="namespace of a Slinky cluster's slurmd pods: checks "
                                         "slurm-operator (CRDs, Deployment, version) and the cordon path (KUBECONFIG)",
                                         json_schema_extra=_flag(metavar="NS"))

    @field_validator("policy", "ssh_key", mode="before")
    @classmethod
    def _split_paths(cls, value: Any) -> Any:
        return _split_list(value)


class ScorecardSettings(Settings):
    """``trainguard scorecard``: the settings of ``run`` (same flags, environment and config file): the
    audit database to read and the scheduler whose jobs and nodes show what happened after each advice."""

    COMMAND: ClassVar[str] = "scorecard"
    FLAGS: ClassVar[tuple[str, ...] | None] = (
        "config", "scheduler", "db_url", "db_url_file", "home", "slurm_jwt", "slurm_jwt_file", "ssh_key",
        "known_hosts", "log_level")
    """What scorecard reads: the audit database and the scheduler (no telemetry, HTTP, limits or shards)."""

    ssh_key: PathList = Field(default_factory=list, description="SSH private key for slurm-ssh (repeatable)",
                              json_schema_extra=_flag(metavar="FILE"))
    known_hosts: Path | None = Field(None, description="SSH known_hosts file for slurm-ssh",
                                     json_schema_extra=_flag(metavar="FILE"))

    @field_validator("ssh_key", mode="before")
    @classmethod
    def _split_paths(cls, value: Any) -> Any:
        return _split_list(value)


# ---------------------------------------------------------------------- flags


def env_names(cls: type[Settings], name: str) -> list[str]:
    """The environment variables of setting ``name``, in order of precedence."""
    alias = cls.model_fields[name].validation_alias
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices if str(choice).isupper()]
    return [f"{ENV_PREFIX}{name.upper()}"]


def flag_of(cls: type[Settings], name: str) -> str:
    extra = cls.model_fields[name].json_schema_extra
    flag = extra.get("flag") if isinstance(extra, dict) else None
    return str(flag) if flag else "--" + name.replace("_", "-")


# ---------------------------------------------------------------------- helpers


def _split_list(value: Any) -> Any:
    """A list from the environment: comma-separated; from a flag or the file: as given."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _read_secret(path: Path, name: str) -> str:
    """The secret in ``path`` (:func:`trainguard.model.secrets.read_secret`), refused naming the setting."""
    try:
        return secrets.read_secret(path)
    except secrets.SecretFileError as exc:
        raise ConfigError(f"{name}: {exc}") from exc
