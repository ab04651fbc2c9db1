"""End to end on the simulated cluster: a node goes NotReady under a running opted-in JobSet.

kwok's node-not-ready stage turns ``kwok-node-N`` NotReady (as a node whose kubelet stopped
reporting), and the JobSet's pod on it dies with it (exit 137, no log line of its own). In Action
mode (with a rule that excludes a system failure's suspects) the verdict carries the Node
conditions as evidence, the node is excluded by us (cordon + our taint), the JobSet's own failure
policy restarts it off that node (we never suspend it: one restart only), and it completes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.kube_cluster.harness import completed, install, operator_running, restarted, running, until
from tests.support.kube_cluster import SimCluster
from trainguard.k8s.kubejobs import common, nodes
from trainguard.model import vocab

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.timeout(600)]

POLICY = """apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {{name: gpu, namespace: {ns}}}
spec:
  mode: Action
  detection: {{settle: 1s, hangTimeout: 600s}}
  rules:
  - match: {{attributions: [system]}}
    action: RequeueExcluding
"""
"""A node that stops reporting is a system failure (not a hardware word in its condition); the
default ``excludeOnHardware`` excludes hardware suspects only, so this policy asks for the
exclusion of a system failure's suspect nodes by a rule."""


async def test_a_node_going_not_ready_is_excluded_and_the_jobset_restarts_off_it_once(
        sim_cluster: SimCluster, sim_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sim, ns = sim_cluster, sim_namespace
    install(sim, POLICY.format(ns=ns))
    sim.create_jobset("train", ns, replicated_jobs=(("leaders", 1, 2), ("workers", 1, 2)), gpus=4,
                      annotations={"trainguard.dev/policy": "gpu"})
    first = await until("4 running pods of attempt 0", lambda: running(sim, ns, "train", 0))
    for pod in first:
        sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 1 loss 2.0"])
    victim = first[1]
    bad = victim["spec"]["nodeName"]
    wid = common.workload_id(ns, "JobSet", "train")

    try:
        async with operator_running(sim, ns, tmp_path, monkeypatch) as op:
            await until("the WorkloadRecovery", lambda: sim.get("workloadrecovery", "jobset-train", ns))
            sim.set_node_ready(bad, False)
            await until(f"{bad} NotReady", lambda: not sim.node_ready(bad))
            sim.fail_pod(ns, victim["metadata"]["name"], exit_code=137, reason="Error", message="node lost")
            recorded = await op.recovery(wid)
            trail = recorded.trail
            advice = recorded.one(vocab.AuditKind.ADVICE)
            assert advice.payload["action"] == "requeue" and advice.payload["exclude_nodes"] == [bad], (
                advice.payload["reasons"], trail)
            assert f"{bad} is NotReady" in json.dumps(recorded.one(vocab.AuditKind.VERDICT).payload), trail
            node = sim.get("node", bad) or {}
            assert nodes.has_our_taint(node) and node["spec"]["unschedulable"] is True
            jobset = sim.get("jobset", "train", ns) or {}
            assert not jobset["spec"].get("suspend")
            assert common.RESTARTS_ANNOTATION not in (jobset["metadata"].get("annotations") or {}), trail

            again = await until("the restarted JobSet running", lambda: restarted(sim, ns, "train"))
            assert all(p["spec"]["nodeName"] != bad for p in again)
            for pod in again:
                sim.complete_pod(ns, pod["metadata"]["name"])

            await until("the JobSet completed", lambda: completed(sim, ns, "train"))
            assert int(((sim.get("jobset", "train", ns) or {}).get("status") or {}).get("restarts") or 0) == 1
    finally:
        sim.set_node_ready(bad, True)
