"""In-memory (and file-backed) implementations of OUR Scheduler Protocol, for executor tests.

Not a fake of Slurm: a small model of the semantics ``schedulers/base.py`` promises
(requeue increments the restart count and leaves the job pending; "already done" is
success; exclusions only on pending jobs; drains carry our tag). Every call is logged in
``calls`` (reads included) so tests can assert that Monitor mode only read; every call
that changed state is logged in ``mutations`` (the "effective actions").

``FileFakeScheduler`` keeps state and both logs in a JSON file, rewritten atomically after
every call, so a driver process can be SIGKILLed and restarted against the same scheduler.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from trainguard.model import workloads
from trainguard.schedulers import base

READS = frozenset({"get_job", "list_jobs", "list_nodes", "close"})
"""Methods that never change scheduler state."""

REQUEUE_HOLD = {"hold_reason": "JobHeldUser", "hold_detail": "job requeued in held state"}
"""How Slurm shows a hold placed by ``scontrol requeuehold`` (22.05)."""
ADMIN_HOLD = {"hold_reason": "JobHeldAdmin"}
"""How Slurm shows a hold placed by an operator's ``scontrol hold`` (the description stays)."""
NOT_HELD = {"held": False, "hold_reason": "", "hold_detail": ""}


class FakeScheduler:
    """A scheduler held in memory. Configure ``fail`` / ``no_effect`` / ``after`` per operation."""

    name = "fake"

    def __init__(self, jobs: Iterable[workloads.JobSnapshot] = (), nodes: Iterable[str] = ()) -> None:
        self.jobs: dict[str, workloads.JobSnapshot] = {job.job_id: job for job in jobs}
        self.nodes: dict[str, workloads.NodeSnapshot] = {
            name: workloads.NodeSnapshot(name=name, state="IDLE", partitions=["debug"]) for name in nodes
        }
        self.calls: list[tuple[Any, ...]] = []
        self.mutations: list[dict[str, Any]] = []
        self.fail: dict[str, Exception] = {}
        """operation -> exception raised (every time) instead of acting."""
        self.no_effect: set[str] = set()
        """operations that report success but change nothing (to exercise verification)."""
        self.after: dict[str, Callable[[], None]] = {}
        """operation -> hook run after the operation took effect (e.g. move a clock)."""

    # -- persistence hooks (no-ops in memory) -------------------------------------------------------

    def _load(self) -> None:
        return None

    def _save(self) -> None:
        return None

    def mutating_calls(self) -> list[tuple[Any, ...]]:
        return [call for call in self.calls if call[0] not in READS]

    def _job(self, job_id: str) -> workloads.JobSnapshot:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise base.JobGone(f"Invalid job id specified: {job_id}") from None

    def _call(self, operation: str, *args: Any) -> bool:
        """Log the call; raise the configured failure; False when the call must not take effect."""
        self._load()
        self.calls.append((operation, *args))
        self._save()
        if operation in self.fail:
            raise self.fail[operation]
        return operation not in self.no_effect

    def _mutate(self, operation: str, job_id: str, **update: Any) -> None:
        self.jobs[job_id] = self.jobs[job_id].model_copy(update=update)
        self.mutations.append({"operation": operation, "target": job_id, **{k: _plain(v) for k, v in update.items()}})
        self._save()
        if operation in self.after:
            self.after[operation]()

    # -- reads ------------------------------------------------------------------------------------

    async def list_jobs(self) -> list[workloads.JobSnapshot]:
        self._call("list_jobs")
        return list(self.jobs.values())

    async def get_job(self, job_id: str) -> workloads.JobSnapshot:
        self._call("get_job", job_id)
        return self._job(job_id)

    async def list_nodes(self) -> list[workloads.NodeSnapshot]:
        self._call("list_nodes")
        return list(self.nodes.values())

    # -- job operations ---------------------------------------------------------------------------

    def _requeue(self, operation: str, job_id: str, *, hold: bool) -> None:
        if not self._call(operation, job_id):
            return
        job = self._job(job_id)
        if not job.requeue_allowed:
            raise base.SchedulerError(f"Requested operation is presently disabled for job {job_id}")
        if job.state in (workloads.JobState.PENDING, workloads.JobState.REQUEUED):
            if hold and not job.held:
                self._mutate(operation, job_id, held=True, **ADMIN_HOLD)  # the adapters fall back to hold
            return  # already requeued: success, nothing to do
        held = REQUEUE_HOLD if hold else {}
        self._mutate(operation, job_id, attempt=job.attempt + 1, state=workloads.JobState.PENDING, nodes=[],
                     held=hold or job.held, exit_code=None, **held)

    async def requeue(self, job_id: str) -> None:
        self._requeue("requeue", job_id, hold=False)

    async def requeue_hold(self, job_id: str, *, attempt: int | None = None) -> None:
        self._requeue("requeue_hold", job_id, hold=True)

    async def hold(self, job_id: str) -> None:
        if not self._call("hold", job_id):
            return
        job = self._job(job_id)
        if job.state is not workloads.JobState.PENDING:
            raise base.SchedulerError(f"Job {job_id} is not pending: cannot hold (state {job.state.value})")
        if not job.held:
            self._mutate("hold", job_id, held=True, **ADMIN_HOLD)

    async def release(self, job_id: str) -> None:
        if not self._call("release", job_id):
            return
        if self._job(job_id).held:
            self._mutate("release", job_id, **NOT_HELD)

    async def exclude_nodes(self, job_id: str, nodes: list[str]) -> None:
        if not self._call("exclude_nodes", job_id, tuple(nodes)):
            return
        job = self._job(job_id)
        if job.state is not workloads.JobState.PENDING and not job.exclusions_while_running:
            # Slurm's rule; a job that says otherwise plays a Kubernetes workload (node taints)
            raise base.SchedulerError(f"Job {job_id} is not pending: ExcNodeList can only change while pending")
        unknown = sorted(set(nodes) - set(self.nodes))
        if unknown:
            raise base.SchedulerError(f"Invalid node name specified: {','.join(unknown)}")
        merged = sorted(set(job.excluded_nodes) | set(nodes))
        if merged != sorted(job.excluded_nodes):
            self._mutate("exclude_nodes", job_id, excluded_nodes=merged)

    async def cancel(self, job_id: str) -> None:
        if not self._call("cancel", job_id):
            return
        job = self._job(job_id)
        if not job.state.finished:
            self._mutate("cancel", job_id, state=workloads.JobState.CANCELLED, **NOT_HELD)

    # -- node operations --------------------------------------------------------------------------

    async def drain_node(self, node: str, reason: str) -> None:
        if not self._call("drain_node", node, reason):
            return
        if node not in self.nodes:
            raise base.SchedulerError(f"Invalid node name specified: {node}")
        if not self.nodes[node].drained:
            tagged = reason if reason.startswith(base.OUR_REASON_PREFIX) else f"{base.OUR_REASON_PREFIX} {reason}"
            self.nodes[node] = self.nodes[node].model_copy(update={"drained": True, "state": "DRAIN",
                                                                    "reason": tagged})
            self.mutations.append({"operation": "drain_node", "target": node, "reason": tagged})
            self._save()

    async def resume_node(self, node: str) -> None:
        if not self._call("resume_node", node):
            return
        snapshot = self.nodes[node]
        if snapshot.drained and not snapshot.reason.startswith(base.OUR_REASON_PREFIX):
            raise base.SchedulerError(f"node {node} was not drained by us ({snapshot.reason!r})")
        if snapshot.drained:
            self.nodes[node] = snapshot.model_copy(update={"drained": False, "state": "IDLE", "reason": ""})
            self.mutations.append({"operation": "resume_node", "target": node})
            self._save()

    async def close(self) -> None:
        self._call("close")

    # -- test helpers (not part of the Protocol) -------------------------------------------------------

    def person_holds(self, job_id: str, *, released_first: bool = False) -> None:
        """A person runs ``scontrol hold`` (after ``scontrol release`` if ``released_first``): what
        Slurm then shows, not a call of ours (not logged as a mutation)."""
        self._load()
        job = self.jobs[job_id]
        detail = "" if released_first or not job.held else job.hold_detail
        self.jobs[job_id] = job.model_copy(update={"held": True, "hold_detail": detail, **ADMIN_HOLD})
        self._save()

    def start(self, job_id: str, nodes: list[str]) -> None:
        """The scheduler starts a pending job (what Slurm does on its own)."""
        self._load()
        self.jobs[job_id] = self.jobs[job_id].model_copy(update={"state": workloads.JobState.RUNNING, "nodes": nodes})
        self._save()


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, workloads.JobState) else value


class FileFakeScheduler(FakeScheduler):
    """``FakeScheduler`` whose state and logs live in a JSON file that survives a SIGKILL.

    State is re-read before every call and written (temp file + fsync + rename) after every
    change, so what one process did is exactly what the next one sees.
    """

    def __init__(self, path: Path, jobs: Iterable[workloads.JobSnapshot] = (), nodes: Iterable[str] = ()) -> None:
        super().__init__(jobs, nodes)
        self.path = Path(path)
        if self.path.exists():
            self._load()
        else:
            self._save()

    def _load(self) -> None:
        data = json.loads(self.path.read_text())
        self.jobs = {k: workloads.JobSnapshot.model_validate(v) for k, v in data["jobs"].items()}
        self.nodes = {k: workloads.NodeSnapshot.model_validate(v) for k, v in data["nodes"].items()}
        self.calls = [tuple(call) for call in data["calls"]]
        self.mutations = data["mutations"]

    def _save(self) -> None:
        data = {
            "jobs": {k: v.model_dump(mode="json") for k, v in self.jobs.items()},
            "nodes": {k: v.model_dump(mode="json") for k, v in self.nodes.items()},
            "calls": [list(call) for call in self.calls],
            "mutations": self.mutations,
        }
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(data, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
