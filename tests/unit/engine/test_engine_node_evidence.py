"""Engine: node evidence in the verdict. Every verdict lists the sources it used and why any was
unavailable; the loop decides without them; a node drained by someone else's health check makes an
otherwise unknown crash hardware on that node (issue 10)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.unit.engine import scenario
from trainguard.k8s import node_conditions
from trainguard.model import evidence, vocab
from trainguard.signals import gpu_metrics

CUDA_UNKNOWN = "RuntimeError: CUDA error: unknown error"


async def _verdict(h: scenario.Harness, job_id: str) -> dict[str, Any]:
    records = await h.records(job_id, vocab.AuditKind.VERDICT)
    assert records, await h.kinds(job_id)
    return records[0].payload


async def test_without_telemetry_the_verdict_says_so_and_the_loop_decides(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("60", started_at=scenario.START)
    await h.step()
    h.write("60", *scenario.ranked(1, CUDA_UNKNOWN))
    h.fail("60")
    await h.step()
    await h.settle()

    verdict = await _verdict(h, "60")
    assert verdict["attribution"] == "unknown"
    sources = {s["name"]: (s["state"], s["reason"]) for s in verdict["sources"]}
    assert sources == {"log": ("used", ""), "prometheus": ("not_configured", "no --prometheus-url"),
                       "fake-nodes": ("used", "")}, verdict["sources"]
    assert [a["action"] for a in await h.advice("60")] == ["requeue"]


async def test_an_unreachable_prometheus_is_listed_as_unavailable_and_the_loop_goes_on(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    # a closed loopback port: connection refused at once
    h.engine.evidence.gpu_metrics = gpu_metrics.GpuMetrics(
        gpu_metrics.GpuMetricsConfig(url="http://127.0.0.1:9", timeout_s=2))
    h.submit("61", started_at=scenario.START)
    await h.step()
    h.write("61", *scenario.ranked(1, CUDA_UNKNOWN))
    h.fail("61")
    await h.step()
    await h.settle()

    verdict = await _verdict(h, "61")
    prometheus = next(s for s in verdict["sources"] if s["name"] == "prometheus")
    assert prometheus["state"] == "unavailable" and "127.0.0.1:9" in prometheus["reason"], prometheus
    assert any(r.startswith("prometheus unavailable: ") for r in verdict["reasons"])
    assert [a["action"] for a in await h.advice("61")] == ["requeue"]


async def test_a_node_drained_by_a_gpu_health_check_during_the_attempt_is_the_hardware_suspect(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    h.submit("62", started_at=scenario.START)
    await h.step()
    h.scheduler.nodes["node2"] = h.scheduler.nodes["node2"].model_copy(
        update={"state": "MIXED+DRAIN", "drained": True, "reason": "NHC: nv_health: GPU 3 Xid 79"})
    h.write("62", *scenario.ranked(0, CUDA_UNKNOWN))  # rank 0 runs on node1: the log blames node1
    h.fail("62")
    await h.step()
    await h.settle()

    verdict = await _verdict(h, "62")
    assert (verdict["attribution"], verdict["nodes"]) == ("hardware", ["node2"]), verdict["reasons"]
    assert [f["node"] for f in verdict["node_evidence"]] == ["node2"]
    advice = await h.advice("62")
    assert [(a["action"], a["exclusions"]) for a in advice] == [("requeue", ["node2"])], advice


class _NodeObjects:
    """A further node-evidence source (the engine's ``node_sources``) answering from Node objects as JSON,
    through the real reading of Kubernetes conditions (k8s/node_conditions.py)."""

    name = node_conditions.SOURCE

    def __init__(self, bodies: list[dict[str, Any]] | None) -> None:
        self.bodies = bodies

    async def window(self, nodes: Sequence[str], start: float | None, now: float) -> evidence.NodeEvidence:
        if self.bodies is None:
            raise ConnectionRefusedError("apiserver down")
        return evidence.NodeEvidence(findings=node_conditions.findings(nodes, self.bodies), sources=[
            evidence.SourceStatus(name=self.name, state=evidence.SourceState.USED)])


async def test_a_not_ready_node_from_a_further_node_source_is_the_suspect(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.engine.evidence.node_sources = [_NodeObjects([{"metadata": {"name": "node2"}, "status": {"conditions": [
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]}}])]
    h.submit("63", started_at=scenario.START)
    await h.step()
    h.write("63", *scenario.ranked(0, CUDA_UNKNOWN))
    h.fail("63")
    await h.step()
    await h.settle()

    verdict = await _verdict(h, "63")
    assert (verdict["attribution"], verdict["nodes"]) == ("system", ["node2"]), verdict["reasons"]
    assert node_conditions.SOURCE in [s["name"] for s in verdict["sources"]]


async def test_a_failing_further_node_source_is_unavailable_and_the_loop_goes_on(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    h.engine.evidence.node_sources = [_NodeObjects(None)]
    h.submit("64", started_at=scenario.START)
    await h.step()
    h.write("64", *scenario.ranked(1, CUDA_UNKNOWN))
    h.fail("64")
    await h.step()
    await h.settle()

    verdict = await _verdict(h, "64")
    source = next(s for s in verdict["sources"] if s["name"] == node_conditions.SOURCE)
    assert source["state"] == "unavailable" and "apiserver down" in source["reason"], source
    assert [a["action"] for a in await h.advice("64")] == ["requeue"]
