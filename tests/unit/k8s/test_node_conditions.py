"""Node conditions and taints as node evidence (k8s/node_conditions.py) and how attribution weighs them."""

from __future__ import annotations

from typing import Any

from trainguard.attribute import evidence as node_evidence
from trainguard.k8s import node_conditions
from trainguard.model import evidence, verdicts, vocab


def _node(name: str, conditions: list[dict[str, str]], taints: list[dict[str, str]] | None = None,
          unschedulable: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {"conditions": conditions}}


READY = {"type": "Ready", "status": "True", "reason": "KubeletReady"}


def test_a_healthy_node_says_nothing_and_only_the_attempts_nodes_are_read() -> None:
    bodies = [_node("kwok-node-1", [READY, {"type": "MemoryPressure", "status": "False"}]),
              _node("kwok-node-9", [{"type": "Ready", "status": "False"}])]
    assert node_conditions.findings(["kwok-node-1"], bodies) == []


def test_not_ready_is_a_fault_with_its_reason() -> None:
    body = _node("kwok-node-2", [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                  "message": "Kubelet stopped posting node status.",
                                  "lastTransitionTime": "2026-12-01T20:00:00Z"}],
                 taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}])
    found = node_conditions.findings(["kwok-node-2"], [body])
    assert [(f.fault, f.text) for f in found] == [
        (True, "kwok-node-2 is NotReady (Ready=Unknown): NodeStatusUnknown Kubelet stopped posting node status."),
        (False, "kwok-node-2 is tainted node.kubernetes.io/unreachable:NoExecute"),
    ]
    assert found[0].signal == node_evidence.NODE_CONDITION and found[0].at == 1796155200.0


def test_npd_conditions_and_foreign_taints_are_faults_pressure_and_ours_are_not() -> None:
    body = _node("gpu-a03", [READY, {"type": "XidError", "status": "True", "reason": "Xid79",
                                     "message": "GPU has fallen off the bus"},
                             {"type": "DiskPressure", "status": "True"}],
                 taints=[{"key": "nvidia.com/gpu.health", "value": "unhealthy", "effect": "NoSchedule"},
                         {"key": "trainguard.dev/suspect", "value": "w1", "effect": "NoSchedule"},
                         {"key": "dedicated", "value": "ml", "effect": "PreferNoSchedule"}],
                 unschedulable=True)
    found = node_conditions.findings(["gpu-a03"], [body])
    assert [(f.fault, f.category, f.text) for f in found] == [
        (True, vocab.Category.GPU_XID_HARDWARE,
         "gpu-a03 has condition XidError=True: Xid79 GPU has fallen off the bus"),
        (False, vocab.Category.NONE, "gpu-a03 has condition DiskPressure=True"),
        (True, vocab.Category.NONE, "gpu-a03 is tainted nvidia.com/gpu.health=unhealthy:NoSchedule"),
        (False, vocab.Category.NONE, "gpu-a03 is tainted dedicated=ml:PreferNoSchedule"),
        (False, vocab.Category.NONE, "gpu-a03 is cordoned"),
    ]


def test_a_node_without_a_node_object_is_only_context() -> None:
    (gone,) = node_conditions.findings(["kwok-node-4"], [])
    assert not gone.fault and "is not a Node" in gone.text


def _verdict(attribution: vocab.Attribution, category: vocab.Category) -> verdicts.Verdict:
    return verdicts.Verdict(category=category, attribution=attribution, confidence=0.4)


def test_a_not_ready_node_makes_an_unknown_crash_a_system_fault_of_that_node() -> None:
    body = _node("kwok-node-2", [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}])
    found = evidence.NodeEvidence(findings=node_conditions.findings(["kwok-node-2"], [body]),
                                  sources=[evidence.SourceStatus(name=node_conditions.SOURCE,
                                                                 state=evidence.SourceState.USED)])
    verdict = node_evidence.apply(_verdict(vocab.Attribution.UNKNOWN, vocab.Category.PROCESS_SIGNAL_KILLED), found,
                                  ["kwok-node-1", "kwok-node-2"])
    assert verdict.attribution == vocab.Attribution.SYSTEM
    assert verdict.suspect_nodes == ["kwok-node-2"]
    assert verdict.confidence == node_evidence.CONFIDENCE_NODE_STATE
    assert node_conditions.SOURCE in [s.name for s in verdict.sources]


def test_a_gpu_condition_makes_it_hardware_and_other_nodes_never_count() -> None:
    body = _node("kwok-node-3", [READY, {"type": "GPUProblem", "status": "True", "reason": "XidCritical"}])
    found = evidence.NodeEvidence(findings=node_conditions.findings(["kwok-node-3"], [body]))
    verdict = node_evidence.apply(_verdict(vocab.Attribution.UNKNOWN, vocab.Category.NCCL_ERROR), found,
                                  ["kwok-node-3"])
    assert verdict.attribution == vocab.Attribution.HARDWARE and verdict.suspect_nodes == ["kwok-node-3"]
    outside = node_evidence.apply(_verdict(vocab.Attribution.UNKNOWN, vocab.Category.NCCL_ERROR), found,
                                  ["kwok-node-1"])
    assert outside.attribution == vocab.Attribution.UNKNOWN and outside.suspect_nodes == []
