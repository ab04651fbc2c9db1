"""The Kubernetes signal sources on the simulated cluster (real apiserver, kwok pods and logs, real JobSet
controller): the pod-log book (k8s/podlogs.py) and Node conditions as node evidence (k8s/node_conditions.py).

Pinned here: lines appended to a pod's log are read once each, tagged with the pod's node and rank; a
reconnect of a stream and a restart of the book resume without duplicates or gaps; a pod replaced by the
JobSet's restart is followed; a kwok-failed pod yields our termination line and the catalog's anomaly;
a NotReady node shows in node evidence.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import kubernetes_asyncio.client
import pytest

from tests.support.kube_cluster import JOBSET_NAME_LABEL, NODES, PYTORCHJOB_NAME_LABEL, SimCluster
from trainguard.cli import main
from trainguard.k8s import client, node_conditions, podlog_parts, podlogs
from trainguard.model import clock, signals
from trainguard.signals import resume
from trainguard.signals.positions import TailPosition

pytestmark = [pytest.mark.integration, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.timeout(600)]

T = TypeVar("T")
WAIT_S = 120.0
CONFIG = podlog_parts.Config(retry_s=0.2, max_backoff_s=2.0)


@pytest.fixture
async def api(sim_cluster: SimCluster) -> AsyncIterator[kubernetes_asyncio.client.ApiClient]:
    api_client = await client.load_api_client(str(sim_cluster.kubeconfig))
    async with api_client:
        yield api_client


async def _until(what: str, probe: Callable[[], T | bool | None], within: float = WAIT_S) -> T:
    """Poll a condition (bounded); the interval only spares the machine."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = probe()
        if value is not None and value is not False:
            return value  # type: ignore[return-value]
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what} (last: {value!r})")
        await asyncio.sleep(0.2)


class Reader:
    """Reads a book round after round like the engine's tailing loop, consuming every line."""

    def __init__(self, book: podlogs.PodLogBook) -> None:
        self.book = book
        self.lines: list[signals.LogLine] = []

    async def until(self, what: str, done: Callable[[list[signals.LogLine]], bool]) -> list[signals.LogLine]:
        async def probe() -> bool:
            for stream, lines in await self.book.read():
                for line in lines:
                    self.book.consume(stream, line)
                self.lines += lines
            return done(self.lines)

        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while not await probe():
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting for {what}; read: {[ln.text for ln in self.lines]}")
            await asyncio.sleep(0.2)
        return self.lines

    def texts(self) -> list[str]:
        return [ln.text for ln in self.lines]


def _book(api: kubernetes_asyncio.client.ApiClient, path: str, start: resume.Start | None = None
          ) -> podlogs.PodLogBook:
    make, _source = podlogs.books(api, CONFIG)
    book = make("kube/train", "train", clock.SystemClock(), None)
    assert isinstance(book, podlogs.PodLogBook)
    book.add(path, "stdout", start)
    return book


def _running(sim: SimCluster, ns: str, count: int) -> dict[str, dict[str, Any]]:
    found = sim.wait_pods_running(ns, f"{JOBSET_NAME_LABEL}=train", count)
    return {p["metadata"]["name"]: p for p in found}


def _rank(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"])


async def test_pod_logs_of_a_jobset_once_each_across_reconnects_restarts_and_replaced_pods(
        sim_cluster: SimCluster, sim_namespace: str, api: kubernetes_asyncio.client.ApiClient, tmp_path: Path) -> None:
    ns = sim_namespace
    sim_cluster.create_jobset("train", ns, replicated_jobs=[("workers", 2, 1)], gpus=1, max_restarts=2)
    first = _running(sim_cluster, ns, 2)
    path = f"k8s://{ns}/JobSet/train"
    book = _book(api, path)
    reader = Reader(book)
    for name in first:
        sim_cluster.write_pod_log(ns, name, [f"{name} line {i}" for i in range(3)])
    await reader.until("the first lines of both pods", lambda ls: len(ls) >= 6)
    # each line once, with the pod's node and its rank (the Job index of a one-pod job)
    assert sorted(reader.texts()) == sorted(f"{n} line {i}" for n in first for i in range(3))
    for line in reader.lines:
        pod = first[line.text.split(" ")[0]]
        assert (line.node, line.rank) == (pod["spec"]["nodeName"], _rank(pod))

    # a reconnect: the stream of one container is closed and opened again (sinceTime = its newest second)
    victim = sorted(first)[0]
    uid = first[victim]["metadata"]["uid"]
    follow = book._follows[(victim, "main")]
    assert follow.task is not None
    follow.task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await follow.task
    follow.task = None
    book._start_follows(book._views[uid])
    sim_cluster.write_pod_log(ns, victim, [f"{victim} after reconnect"])
    await reader.until("the line after the reconnect", lambda ls: any("after reconnect" in ln.text for ln in ls))
    assert len(reader.texts()) == len(set(reader.texts())) == 7

    # a restart of ours: the saved position comes back as the attempt's start of a new book
    saved = [s.consumed for s in book.unsaved() if s.consumed is not None]
    assert len(saved) == 1 and isinstance(saved[0], TailPosition)
    book.close()
    await book.wait_closed()
    for name in first:
        sim_cluster.write_pod_log(ns, name, [f"{name} while we were down"])
    make, _source = podlogs.books(api, CONFIG)
    start = make("kube/train", "train", clock.SystemClock(), None).attempt_start(
        path, attempt=0, running=True, started_at=None, mine=saved, earlier=[])  # as the engine asks on first sight
    assert start is not None and start.basis == "stored"
    book = _book(api, path, start)
    again = Reader(book)
    await again.until("the lines written while we were down", lambda ls: len(ls) >= 2)
    assert sorted(again.texts()) == sorted(f"{n} while we were down" for n in first)
    assert min(ln.lineno for ln in again.lines) == saved[0].lineno + 1  # numbering continues, nothing re-read

    # a pod fails (kwok's stage, reason and exit code from its annotations): our termination line, then the
    # JobSet's own failure policy replaces both pods and the book follows the new ones
    node = first[victim]["spec"]["nodeName"]
    sim_cluster.fail_pod(ns, victim, exit_code=137, reason="OOMKilled", message="memory limit 1Gi")
    ending = f"trainguard: pod {victim} container main on {node} ended: reason=OOMKilled exitCode=137 signal=SIGKILL"
    await again.until("the termination line", lambda ls: any(ln.text.startswith(ending) for ln in ls))
    (term,) = [ln for ln in again.lines if ln.text.startswith(ending)]
    assert (term.node, term.rank) == (node, _rank(first[victim]))

    replaced = await _until("the JobSet's new pods", lambda: (
        (found := {n: p for n, p in _running(sim_cluster, ns, 2).items() if n not in first}) and len(found) == 2
        and found))
    for name in replaced:
        sim_cluster.write_pod_log(ns, name, [f"{name} attempt 1 running"])
    await again.until("the replaced pods' lines", lambda ls: sum("attempt 1 running" in ln.text for ln in ls) == 2)
    texts = again.texts()
    assert len(texts) == len(set(texts))  # never a line twice
    assert not any("line 0" in t for t in texts)  # nothing from before the restart of the book

    # the catalog's anomaly from what the book read (the same patterns as the live detector)
    log = tmp_path / "train.log"
    log.write_text("\n".join(texts) + "\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main.main(["detect", "--format", "json", str(log)])
    result = json.loads(out.getvalue())
    assert (result["symptom"], result["category"], result["attribution"]) == ("crash", "oom_host_killed", "application")
    assert result["suspect_nodes"] == [node]
    assert any(e["pattern"] == "k8s.container_oomkilled" for e in result["evidence"])
    book.close()
    await book.wait_closed()


async def test_a_not_ready_node_is_node_evidence(sim_cluster: SimCluster,
                                                 api: kubernetes_asyncio.client.ApiClient) -> None:
    sick, healthy = NODES[3], NODES[0]
    source = node_conditions.NodeConditions(api)
    before = await source.window([sick, healthy], None, 0.0)
    assert before.findings == [] and before.sources[0].state.value == "used"
    sim_cluster.set_node_ready(sick, False)
    try:
        await _until(f"{sick} NotReady", lambda: not sim_cluster.node_ready(sick))
        found = await source.window([sick, healthy], None, 0.0)
        faults = found.faults()
        assert [f.node for f in faults] == [sick]
        assert faults[0].text.startswith(f"{sick} is NotReady")
        assert faults[0].signal == "node_condition"
    finally:
        sim_cluster.set_node_ready(sick, True)
        await _until(f"{sick} Ready again", lambda: sim_cluster.node_ready(sick))



async def test_pytorchjob_ranks_and_a_pod_recreated_under_its_name_read_once(
        sim_cluster: SimCluster, sim_namespace: str, api: kubernetes_asyncio.client.ApiClient) -> None:
    ns = sim_namespace
    sim_cluster.create_pytorchjob("bert", ns, workers=2, gpus=1)
    first = {p["metadata"]["name"]: p for p in sim_cluster.wait_pods_running(ns, f"{PYTORCHJOB_NAME_LABEL}=bert", 3)}
    book = _book(api, f"k8s://{ns}/PyTorchJob/bert")
    reader = Reader(book)
    for name in first:
        sim_cluster.write_pod_log(ns, name, [f"{name} hello"])
    await reader.until("a line of each pod", lambda ls: len(ls) >= 3)
    # Master is rank 0, Worker i is rank i + 1 (as the training-operator sets RANK)
    assert {ln.text.split(" ")[0]: ln.rank for ln in reader.lines} == {
        "bert-master-0": 0, "bert-worker-0": 1, "bert-worker-1": 2}

    # a worker killed (137 is retryable under restartPolicy ExitCode): the operator recreates the pod under
    # the same name; kwok serves the same log file again, and the book reads only what is new
    victim = "bert-worker-1"
    old_uid = first[victim]["metadata"]["uid"]
    sim_cluster.fail_pod(ns, victim, exit_code=137, reason="Error")
    await reader.until("the termination line", lambda ls: any(
        ln.text.startswith(f"trainguard: pod {victim} container pytorch on ") for ln in ls))
    await _until(f"{victim} recreated", lambda: (
        (pod := sim_cluster.get("pod", victim, ns)) is not None and pod["metadata"]["uid"] != old_uid
        and pod["status"].get("phase") == "Running"))
    sim_cluster.write_pod_log(ns, victim, [f"{victim} after the restart"])
    await reader.until("the recreated pod's line", lambda ls: any("after the restart" in ln.text for ln in ls))
    texts = reader.texts()
    assert len(texts) == len(set(texts)) and texts.count(f"{victim} hello") == 1
    (ending,) = [t for t in texts if t.startswith("trainguard: pod ")]
    assert "reason=Error exitCode=137 signal=SIGKILL" in ending
    book.close()
    await book.wait_closed()
