"""attribute.allocation and the rules' allocation check: a host name from log text is evidence,
never a suspect, unless the scheduler placed one of the workload's attempts on that node."""

from __future__ import annotations

from trainguard.attribute import allocation, lemon, rules
from trainguard.model import anomalies, verdicts, vocab

NOW = 1_700_000_000.0
DAY = 86400.0
C = vocab.Category
PLACED = {"node1", "node2"}


def _forged_xid(node: str = "node4") -> anomalies.Anomaly:
    evidence = anomalies.Evidence(line=7, text=f"Nov 30 13:00:00 {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79",
                                  pattern="xid.hardware", node=node, xid=79, category=C.GPU_XID_HARDWARE)
    return anomalies.Anomaly(symptom=vocab.Symptom.CRASH, category=C.GPU_XID_HARDWARE, evidence=[evidence],
                             suspect_nodes=[node])


def _lemon_history(node: str, incidents: int) -> lemon.NodeHistory:
    return lemon.NodeHistory(implications=[
        lemon.Implication(node=node, at=NOW - 60 * (i + 1), workload=f"other/{i}", attempt=0,
                          category=C.GPU_XID_HARDWARE)
        for i in range(incidents)
    ])


def test_a_node_outside_the_allocation_is_not_a_suspect_nor_a_lemon() -> None:
    verdict = rules.attribute(_forged_xid(), node_history=_lemon_history("node4", 5),
                              lemon_rule=lemon.LemonRule(2, 7 * DAY), now=NOW, workload="w", attempt=0,
                              job_nodes=["node1", "node2"], allocation=PLACED)
    assert verdict.attribution == vocab.Attribution.HARDWARE  # the line still reads as a hardware fault
    assert verdict.suspect_nodes == [] and verdict.lemon_nodes == []
    assert verdict.outside_allocation == ["node4"]
    assert any("never allocated to this workload: node4" in reason for reason in verdict.reasons)


def test_a_node_inside_the_allocation_stays_a_suspect() -> None:
    verdict = rules.attribute(_forged_xid("node2"), node_history=lemon.NodeHistory(),
                              lemon_rule=lemon.LemonRule(3, 7 * DAY), now=NOW, workload="w",
                              job_nodes=["node1", "node2"], allocation=PLACED)
    assert (verdict.suspect_nodes, verdict.outside_allocation) == (["node2"], [])


def test_without_an_allocation_the_rules_do_not_check_names() -> None:
    """Offline ``detect``: no scheduler, nothing acted on; the log's names are reported as read."""
    verdict = rules.attribute(_forged_xid(), node_history=lemon.NodeHistory(), lemon_rule=lemon.LemonRule(3, DAY),
                              now=NOW, workload="w")
    assert verdict.suspect_nodes == ["node4"] and verdict.outside_allocation == []


def test_an_external_verdict_is_held_to_the_allocation_too() -> None:
    external = verdicts.Verdict(attribution=vocab.Attribution.HARDWARE, category=C.GPU_XID_HARDWARE,
                                suspect_nodes=["node2", "node9"], lemon_nodes=["node9"], source="http://svc")
    confined = allocation.confine_verdict(external, _forged_xid(), PLACED)
    assert confined.suspect_nodes == ["node2"] and confined.lemon_nodes == []
    assert confined.outside_allocation == ["node4", "node9"]


def test_confine_anomaly_keeps_the_evidence() -> None:
    anomaly = _forged_xid()
    confined = allocation.confine_anomaly(anomaly, PLACED)
    assert confined.suspect_nodes == [] and confined.evidence == anomaly.evidence
    assert allocation.confine_anomaly(anomaly, {"node4"}) is anomaly
