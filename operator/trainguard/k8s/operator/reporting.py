"""Engine records turned into Events, and the RecoveryPolicy statuses: what the shell reports.

Place: the operator shell (``shell.Shell.reporting``). The engine calls ``on_record`` after each
audit record; the record is queued and returns at once (the engine awaits its listeners before it
acts, so a slow API server must never be waited on there). ``report_forever`` takes the records in
order: the workload's WorkloadRecovery is marked for the coalescer (``recoveries.py``; an advice,
an outcome or a watchdog record within its settle time) and the record's Event is posted
(``k8s/events.py``) on the WorkloadRecovery, or on the JobSet/PyTorchJob itself. Each reconcile
round also brings every RecoveryPolicy's Accepted/Invalid condition up to date (``policy_statuses``),
with an Event when a generation is first judged. The audit store stays the durable log; status and
Events are the view.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Final

import aiohttp
from kubernetes_asyncio import client as k8s

from trainguard.k8s import client, events, policies, recovery
from trainguard.k8s.kubejobs import wiring as kube_wiring
from trainguard.k8s.operator.config import GROUP, POLICIES, VERSION
from trainguard.model import vocab

if TYPE_CHECKING:
    from trainguard.k8s.operator.shell import Shell

logger = logging.getLogger("trainguard.operator")

REPORT_QUEUE: Final = 10_000
"""Engine records waiting for their Event; bounded so an API outage cannot grow memory without end."""
URGENT_KINDS: Final = frozenset({vocab.AuditKind.ADVICE.value, vocab.AuditKind.OUTCOME.value,
                                  vocab.AuditKind.WATCHDOG.value})
"""Records whose status change is written within the coalescer's settle time (a recovery starts,
ends or is given up); other records' changes go out with the next timed flush."""


class Reporting:
    """The queue of engine records and what turns them, and the policies' verdicts, into API writes."""

    def __init__(self, shell: Shell) -> None:
        self.shell = shell
        self.records: asyncio.Queue[tuple[str, str, dict[str, object]]] = asyncio.Queue(maxsize=REPORT_QUEUE)

    async def on_record(self, kind: str, workload: str, payload: dict[str, object]) -> None:
        """Engine listener: queue the record for the reporter and return at once. The engine awaits
        its listeners before it acts, so a slow or unreachable API server must never be waited on
        here; a full queue drops the Event (logged) — status catches up in the next reconcile round."""
        try:
            self.records.put_nowait((kind, workload, payload))
        except asyncio.QueueFull:
            logger.warning("%s: report queue full; %s Event dropped (the audit log has it)", workload, kind)

    async def report_forever(self, stop: asyncio.Event) -> None:
        """Turn queued engine records into WorkloadRecovery updates and Events, in order."""
        while not stop.is_set() or not self.records.empty():
            try:
                kind, workload, payload = await asyncio.wait_for(self.records.get(), timeout=1.0)
            except TimeoutError:
                continue
            try:
                await self.report(kind, workload, payload)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("%s: reporting %s failed", workload, kind)

    async def report(self, kind: str, workload: str, payload: dict[str, object]) -> None:
        """Bring the workload's WorkloadRecovery up to date, then post the record's Event."""
        if self.shell.engine is None or self.shell.api is None:
            return
        rt = self.shell.engine.runtimes.get(workload)
        if rt is None:
            return
        kube = kube_wiring.kube_of(self.shell.scheduler)
        own = kube_wiring.workload_ref(kube, workload) if kube is not None else None
        if own is not None:  # a JobSet/PyTorchJob: Events on the workload itself, and its WorkloadRecovery
            draft = events.draft_for(kind, payload)
            if draft is not None:
                await events.post(self.shell.api, own, draft, self.shell.now())
            try:
                await self.shell.recoveries.object_of(rt)
            except (client.ApiException, aiohttp.ClientError, TimeoutError, ValueError) as exc:
                logger.warning("%s: cannot update its WorkloadRecovery: %s", workload, client.message_of(exc))
                return
            self.shell.recoveries.coalescer.mark(workload, urgent=kind in URGENT_KINDS)
            return
        try:
            obj = await self.shell.recoveries.object_of(rt)
        except (client.ApiException, aiohttp.ClientError, TimeoutError, ValueError) as exc:
            logger.warning("%s: cannot update its WorkloadRecovery: %s", workload, client.message_of(exc))
            return
        self.shell.recoveries.coalescer.mark(workload, urgent=kind in URGENT_KINDS)
        metadata = obj.get("metadata") or {}
        ref = events.ObjectRef(recovery.API_VERSION, recovery.KIND, str(metadata.get("name")),
                               self.shell.config.workload_namespace, metadata.get("uid"))
        draft = events.draft_for(kind, payload)
        if draft is not None:
            await events.post(self.shell.api, ref, draft, self.shell.now())

    async def policy_statuses(self) -> None:
        """Each RecoveryPolicy's status as its verdict and coverage say (a 409 waits for the watch's newer
        object); an Event when a generation is judged for the first time."""
        assert self.shell.api is not None and self.shell.engine is not None
        verdicts = self.shell.book.verdicts()
        conflicts = self.shell.book.conflicts()
        covered: dict[str, int] = {}
        for rt in self.shell.engine.runtimes.values():
            if rt.spec is not None:
                covered[rt.policy_name] = covered.get(rt.policy_name, 0) + 1
        for key, entry in list(self.shell.book.entries.items()):
            previous = policies.parse_status(entry.status)
            name = entry.policy.name if entry.policy is not None else ""
            desired = policies.status_of(entry, verdicts[key], covered.get(name, 0), previous, self.shell.now(),
                                         conflict=conflicts.get(key))
            if desired == previous:
                continue
            body = {"metadata": {"resourceVersion": entry.resource_version},
                    "status": desired.model_dump(mode="json", by_alias=True)}
            try:
                answer = dict(await client.merge_patch(
                    k8s.CustomObjectsApi(self.shell.api).patch_namespaced_custom_object_status,
                    GROUP, VERSION, key[0], POLICIES, key[1], body=body))
            except client.ApiException as exc:
                # 409: the object changed since we read it; its watch event brings the new version.
                logger.info("RecoveryPolicy %s/%s status not written: %s", key[0], key[1], client.message_of(exc))
                continue
            if self.shell.book.entries.get(key) is entry:
                self.shell.book.put(policies.read(answer))
            if previous is None or previous.observed_generation != desired.observed_generation:
                accepted, _, message = verdicts[key]
                draft = events.Draft(events.NORMAL if accepted else events.WARNING,
                                     events.POLICY_ACCEPTED if accepted else events.POLICY_INVALID, message)
                ref = events.ObjectRef(f"{GROUP}/{VERSION}", "RecoveryPolicy", key[1], key[0],
                                       (answer.get("metadata") or {}).get("uid"))
                await events.post(self.shell.api, ref, draft, self.shell.now())
