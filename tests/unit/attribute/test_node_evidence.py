"""Node evidence in attribution: GPU metric faults and scheduler node state change a verdict."""

from __future__ import annotations

from trainguard.attribute import evidence as node_evidence
from trainguard.attribute import lemon, rules
from trainguard.model import anomalies, evidence, verdicts, vocab, workloads

C = vocab.Category
AT = vocab.Attribution
USED = evidence.SourceState.USED
PROM_USED = evidence.SourceStatus(name="prometheus", state=USED)


def _cuda_unknown(node: str = "node1") -> verdicts.Verdict:
    """What the rules make of a job that printed only ``CUDA error: unknown error`` on ``node``."""
    anomaly = anomalies.Anomaly(
        symptom=vocab.Symptom.CRASH, category=C.CUDA_ERROR_OTHER, suspect_nodes=[node],
        evidence=[anomalies.Evidence(line=1, text="CUDA error: unknown error", pattern="cuda.unknown",
                                     category=C.CUDA_ERROR_OTHER, node=node)],
    )
    return rules.attribute(anomaly, node_history=lemon.NodeHistory(), lemon_rule=lemon.LemonRule(3, 86400.0),
                           now=0.0, workload="w")


def _xid(node: str, xid: int = 79, *, fault: bool = True) -> evidence.Finding:
    return evidence.Finding(source="prometheus", node=node, signal="DCGM_FI_DEV_XID_ERRORS",
                            category=C.GPU_XID_HARDWARE, fault=fault, value=xid, gpu=1,
                            text=f"{node} GPU 1: Xid {xid} reported by DCGM during the attempt")


def test_cuda_unknown_error_plus_an_xid_79_on_node2_is_hardware_on_node2() -> None:
    before = _cuda_unknown("node1")
    assert before.attribution == AT.UNKNOWN  # the log alone cannot say
    got = node_evidence.apply(before, evidence.NodeEvidence(findings=[_xid("node2")], sources=[PROM_USED]),
                              allocation={"node1", "node2"})
    assert (got.attribution, got.category, got.suspect_nodes) == (AT.HARDWARE, C.GPU_XID_HARDWARE, ["node2"])
    assert got.confidence == node_evidence.CONFIDENCE_METRIC_FAULT
    assert any("Xid 79" in r and "suspect node2" in r for r in got.reasons)
    assert [s.name for s in got.sources] == ["log", "prometheus"]
    assert got.node_evidence == [_xid("node2")]


def test_without_node_evidence_the_verdict_stays_and_lists_what_was_unavailable() -> None:
    before = _cuda_unknown()
    down = evidence.SourceStatus(name="prometheus", state=evidence.SourceState.UNAVAILABLE,
                                 reason="http://prom:9090 unreachable: connection refused")
    got = node_evidence.apply(before, evidence.NodeEvidence(sources=[down]), allocation={"node1"})
    assert (got.attribution, got.suspect_nodes) == (before.attribution, before.suspect_nodes)
    assert got.sources == [evidence.SourceStatus(name="log", state=USED), down]
    assert "prometheus unavailable: http://prom:9090 unreachable: connection refused" in got.reasons


def test_a_fault_outside_the_allocation_is_ignored() -> None:
    got = node_evidence.apply(_cuda_unknown(), evidence.NodeEvidence(findings=[_xid("node9")], sources=[PROM_USED]),
                              allocation={"node1", "node2"})
    assert got.attribution == AT.UNKNOWN
    assert got.node_evidence == []


def test_context_findings_do_not_change_the_verdict() -> None:
    sbe = evidence.Finding(source="prometheus", node="node2", signal="DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                           category=C.ECC_MEMORY, fault=False, value=3, gpu=0, text="node2 GPU 0: SBE rose by 3")
    got = node_evidence.apply(_cuda_unknown(), evidence.NodeEvidence(findings=[sbe], sources=[PROM_USED]))
    assert got.attribution == AT.UNKNOWN
    assert any("context: node2 GPU 0: SBE rose by 3" in r for r in got.reasons)


def test_the_programs_own_failure_stays_application() -> None:
    oom = verdicts.Verdict(attribution=AT.APPLICATION, category=C.OOM_GPU, suspect_nodes=["node1"])
    got = node_evidence.apply(oom, evidence.NodeEvidence(findings=[_xid("node2")], sources=[PROM_USED]))
    assert (got.attribution, got.suspect_nodes) == (AT.APPLICATION, ["node1"])
    assert any("program's own failure" in r for r in got.reasons)


def test_an_illegal_memory_access_with_an_ecc_fault_is_hardware() -> None:
    illegal = verdicts.Verdict(attribution=AT.APPLICATION, category=C.CUDA_ILLEGAL_MEMORY, suspect_nodes=["node1"])
    dbe = evidence.Finding(source="prometheus", node="node1", signal="DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                           category=C.ECC_MEMORY, fault=True, value=1, gpu=0, text="node1 GPU 0: DBE rose by 1")
    got = node_evidence.apply(illegal, evidence.NodeEvidence(findings=[dbe], sources=[PROM_USED]))
    assert (got.attribution, got.category, got.suspect_nodes) == (AT.HARDWARE, C.ECC_MEMORY, ["node1"])


def test_hardware_in_the_log_is_corroborated() -> None:
    xid_log = verdicts.Verdict(attribution=AT.HARDWARE, category=C.GPU_XID_HARDWARE, suspect_nodes=["node2"],
                               confidence=0.9)
    got = node_evidence.apply(xid_log, evidence.NodeEvidence(findings=[_xid("node2")], sources=[PROM_USED]))
    assert got.suspect_nodes == ["node2"]
    assert got.confidence == 0.95
    assert any("corroborates" in r for r in got.reasons)


def test_a_node_drained_by_a_gpu_health_check_is_hardware_and_one_we_drained_is_not_evidence() -> None:
    nodes = [
        workloads.NodeSnapshot(name="node1", state="IDLE"),
        workloads.NodeSnapshot(name="node2", state="IDLE+DRAIN", reason="NHC: check_nv_healthmon: GPU 1 Xid 79",
                               drained=True),
        workloads.NodeSnapshot(name="node3", state="DRAIN", reason="trainguard: lemon", drained=True),
        workloads.NodeSnapshot(name="node4", state="DOWN", reason="Not responding"),
    ]
    findings = node_evidence.node_state_findings(["node1", "node2", "node3"], nodes, source="slurm-local-nodes",
                                                 our_prefix="trainguard:")
    assert [(f.node, f.fault) for f in findings] == [("node2", True)]
    assert "IDLE+DRAIN" in findings[0].text and "NHC" in findings[0].text
    got = node_evidence.apply(_cuda_unknown(), evidence.NodeEvidence(findings=findings))
    assert (got.attribution, got.suspect_nodes) == (AT.HARDWARE, ["node2"])
    assert got.confidence == node_evidence.CONFIDENCE_NODE_STATE


def test_a_node_down_for_a_non_hardware_reason_is_system() -> None:
    nodes = [workloads.NodeSnapshot(name="node4", state="DOWN", reason="Not responding")]
    findings = node_evidence.node_state_findings(["node4"], nodes, source="s", our_prefix="trainguard:")
    got = node_evidence.apply(_cuda_unknown("node4"), evidence.NodeEvidence(findings=findings))
    assert (got.attribution, got.suspect_nodes) == (AT.SYSTEM, ["node4"])


def test_a_healthy_verdict_is_not_changed_by_evidence() -> None:
    healthy = verdicts.Verdict(attribution=AT.NONE, category=C.NONE)
    got = node_evidence.apply(healthy, evidence.NodeEvidence(findings=[_xid("node2")], sources=[PROM_USED]))
    assert got.attribution == AT.NONE and got.suspect_nodes == []


def test_a_persons_node_reason_is_context_not_a_fault() -> None:
    """An administrator's own words (a drain or DOWN for maintenance) are their decision about the node,
    not a diagnosis: the verdict keeps them as context and names no suspect from them."""
    nodes = [workloads.NodeSnapshot(name="node4", state="DOWN", reason="admin: PSU swap"),
             workloads.NodeSnapshot(name="node3", state="IDLE+DRAIN", reason="maintenance window", drained=True)]
    findings = node_evidence.node_state_findings(["node3", "node4"], nodes, source="s", our_prefix="trainguard:")
    assert [(f.node, f.fault) for f in findings] == [("node4", False), ("node3", False)]
