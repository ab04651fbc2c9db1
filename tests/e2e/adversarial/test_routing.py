"""Policies that fit a real cluster, on the real local Slurm cluster with ``trainguard run --mode action``.

- A job that says just ``trainguard`` in partition ``debug`` is covered by a policy whose selector
  says ``partitions: [debug]`` (no policy is named ``default``), and the audit shows the route.
- A more specific policy (partition and account) wins for jobs of its account; its exit-code rule
  stops a job that exits 42 instead of requeueing it, while the same policy requeues exit 43.
- A hung job submitted with ``--no-requeue`` is stopped, not left holding its node.
- A node we drained (a lemon node) is resumed once ``exclusion.undrainAfter`` has passed; a node a
  person drained (``scontrol update ... State=DRAIN Reason=maintenance``) is never resumed.

Isolation on a shared cluster: the Action policy's selector names an account unique to this
session, so jobs of other tests that say just ``trainguard`` are never routed to it; they may be
routed to the Monitor policy, which records advice and changes nothing. The jobs are plain batch
scripts (no PyTorch): what is under test is routing and the decision, not detection.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness
from tests.support.slurm import SlurmCluster, parse_scontrol_line

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

UNDRAIN_AFTER_S = 20
WAIT_S = 180.0
QUIET_S = 8.0
"""After a stop decision, how long the job must stay un-requeued (a requeue shows at once in Restarts)."""
LEMON = "node4"
HUMAN_DRAINED = "node3"


@dataclass
class Setup:
    cluster: SlurmCluster
    runner: harness.Trainguard
    workdir: Path
    monitor_policy: str
    action_policy: str
    account: str

    def submit(self, body: str, *, comment: str = "trainguard", account: bool = True, node: str | None = None,
               requeue: bool = True) -> str:
        """A one-node batch job running ``body``; output to ``<workdir>/slurm-<id>.out``."""
        args = [f"--comment={comment}", f"--output={self.workdir}/slurm-%j.out", "--nodes=1",
                "--requeue" if requeue else "--no-requeue"]
        if account:
            args.append(f"--account={self.account}")
        if node is not None:
            args.append(f"--nodelist={node}")
        return self.cluster.submit(f"#!/bin/bash\n{body}\n", *args)

    def advice(self, job_id: str) -> list[dict[str, Any]]:
        return harness.of_kind(self.runner.audit(job_id), "advice")

    def wait_advice(self, job_id: str) -> dict[str, Any]:
        records = harness.wait_audit(self.runner, job_id, lambda r: bool(harness.of_kind(r, "advice")),
                                     timeout=WAIT_S, what="advice")
        return harness.of_kind(records, "advice")[0]


def _policies(monitor: str, action: str, account: str) -> str:
    return f"""apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {{name: {monitor}}}
spec:
  mode: Monitor
  selector: {{partitions: [debug]}}
---
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {{name: {action}}}
spec:
  mode: Action
  selector: {{partitions: [debug], accounts: [{account}]}}
  retries: {{maxAttemptsWithoutCheckpoint: 10, backoff: {{initialSeconds: 0}}}}
  exclusion:
    lemonNodeThreshold: 1
    drainLemonNodes: true
    undrainAfter: {UNDRAIN_AFTER_S}s
  actions: {{allowed: [requeue, stop, drainNode]}}
  blastRadius: {{maxDrainedShare: 0.5}}
  rules:
    - match: {{exitCodes: [42]}}
      action: Stop
"""


@pytest.fixture(scope="module")
def setup(slurm_cluster: SlurmCluster, e2e_dir: Path) -> Iterator[Setup]:
    token = secrets.token_hex(4)
    directory = e2e_dir / "trainguard-routing"
    directory.mkdir(parents=True, exist_ok=True)
    policy = directory / "policies.yaml"
    monitor, action, account = f"e2e-debug-{token}", f"e2e-act-{token}", f"e2e-{token}"
    policy.write_text(_policies(monitor, action, account))
    runner = harness.Trainguard(slurm_cluster, directory, mode="action", policy=policy)
    workdir = e2e_dir / "jobs"
    workdir.mkdir(exist_ok=True)
    runner.start()
    try:
        yield Setup(slurm_cluster, runner, workdir, monitor, action, account)
    finally:
        code = runner.stop()
        for node in (LEMON, HUMAN_DRAINED):
            _resume_if_drained(slurm_cluster, node)
        if code != 0:
            print(f"\n--- {runner.log_path} (exit {code}) ---\n{runner.log()}")


def _node(cluster: SlurmCluster, node: str) -> dict[str, str]:
    return parse_scontrol_line(cluster.scontrol("-o", "show", "node", node).strip())


def _resume_if_drained(cluster: SlurmCluster, node: str) -> None:
    if "DRAIN" in _node(cluster, node).get("State", ""):
        cluster.scontrol("update", f"NodeName={node}", "State=RESUME")


def _stays_unrequeued(setup: Setup, job_id: str) -> dict[str, str]:
    deadline = time.monotonic() + QUIET_S
    job = setup.cluster.show(job_id)
    while time.monotonic() < deadline:
        job = setup.cluster.show(job_id)
        assert job.get("Restarts") == "0", f"job {job_id} was requeued: {harness.summary(job)}"
        time.sleep(0.5)
    return job


def test_a_job_that_says_just_trainguard_is_routed_by_its_partition_and_the_audit_shows_the_route(
    setup: Setup,
) -> None:
    job_id = setup.submit("echo 'RuntimeError: boom'; exit 1", account=False)

    advice = setup.wait_advice(job_id)

    payload = advice["payload"]
    assert payload["policy"] == setup.monitor_policy, harness.diagnosis(setup.runner, setup.workdir, job_id)
    route = payload["route"]
    assert route["policy"] == setup.monitor_policy and route["explicit"] is False
    assert "partition 'debug'" in route["reason"] and "specificity 1" in route["reason"]
    assert [c["policy"] for c in route["candidates"]] == [setup.monitor_policy]
    assert payload["mode"] == "Monitor"
    job = harness.wait_job(setup.cluster, job_id, harness.is_final, timeout=WAIT_S, what="final")
    assert job["Restarts"] == "0"  # Monitor: recorded, nothing done


def test_the_more_specific_policy_stops_on_its_exit_code_rule_and_requeues_other_codes(setup: Setup) -> None:
    stopped = setup.submit("echo 'bad input data'; exit 42")
    requeued = setup.submit("echo 'flaky'; exit 43", comment="trainguard max-retries=1")

    advice = setup.wait_advice(stopped)
    payload = advice["payload"]
    assert payload["policy"] == setup.action_policy
    assert [c["policy"] for c in payload["route"]["candidates"]] == [setup.action_policy, setup.monitor_policy]
    assert payload["action"] == "stop", harness.diagnosis(setup.runner, setup.workdir, stopped)
    assert payload["reasons"][0].startswith("rule 0 (exitCodes 42) matched crash")
    job = _stays_unrequeued(setup, stopped)
    assert job["JobState"] == "FAILED" and job["ExitCode"] == "42:0"

    other = setup.wait_advice(requeued)
    assert other["payload"]["action"] == "requeue", harness.diagnosis(setup.runner, setup.workdir, requeued)
    harness.wait_job(setup.cluster, requeued, lambda j: int(j.get("Restarts", "0")) >= 1, timeout=WAIT_S,
                     what="requeued", runner=setup.runner, workdir=setup.workdir)
    harness.wait_job(setup.cluster, requeued, harness.final_and_restarted(1), timeout=WAIT_S,
                     what="final after its one retry", runner=setup.runner, workdir=setup.workdir)


def test_a_hung_job_that_cannot_be_requeued_is_stopped(setup: Setup) -> None:
    job_id = setup.submit("for i in 1 2 3 4 5; do echo \"iteration $i\"; sleep 1; done; sleep 600",
                          comment="trainguard hang-timeout=10s", requeue=False)

    advice = setup.wait_advice(job_id)

    payload = advice["payload"]
    assert payload["action"] == "stop", harness.diagnosis(setup.runner, setup.workdir, job_id)
    assert "the job cannot be requeued (submitted with --no-requeue) and is hung: stop" in payload["reasons"]
    job = harness.wait_job(setup.cluster, job_id, harness.is_final, timeout=WAIT_S, what="stopped",
                           runner=setup.runner, workdir=setup.workdir)
    assert job["JobState"] == "CANCELLED" and job["Restarts"] == "0"


def _xid(node_var: str = "$SLURMD_NODENAME") -> str:
    return (f'echo "$(date "+%b %d %H:%M:%S") {node_var} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=$$, '
            'name=python, GPU has fallen off the bus." >&2; exit 1')


@pytest.mark.slow(
    reason="a drain of ours must outlive its undrainAfter on a real node, beside a person's drain that must not")
def test_a_node_we_drained_is_resumed_after_undrain_after_and_a_node_a_person_drained_never_is(
    setup: Setup,
) -> None:
    setup.cluster.scontrol("update", f"NodeName={HUMAN_DRAINED}", "State=DRAIN", "Reason=maintenance")
    # Two incidents on the same node make it a lemon (threshold 1: one earlier incident); the second
    # one's advice drains it. max-retries=0: each job is stopped, not requeued away from the node.
    first = setup.submit(_xid(), comment="trainguard max-retries=0", node=LEMON)
    setup.wait_advice(first)
    second = setup.submit(_xid(), comment="trainguard max-retries=0", node=LEMON)
    advice = setup.wait_advice(second)
    assert advice["payload"]["drain_nodes"] == [LEMON], harness.diagnosis(setup.runner, setup.workdir, second)

    def resumed(records: list[dict[str, Any]]) -> bool:
        return any(r["payload"].get("operation") == "resume_node" and r["payload"]["status"] == "done"
                   for r in harness.of_kind(records, "action"))

    # The first job may already drain the node (lemon memory from the module's earlier jobs); then its drain
    # is the one resumed, and the second's drain, soon after that return, makes the node a repeat offender:
    # held for repair (the node lifecycle), never resumed by time. Either way one drain of ours is resumed.
    deadline = time.monotonic() + WAIT_S
    while True:
        trails = [setup.runner.audit(job) for job in (first, second)]
        done = [records for records in trails if resumed(records)]
        if done or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    assert done, harness.diagnosis(setup.runner, setup.workdir, second)
    actions = harness.of_kind(done[0], "action")
    drained_at = next(harness.parse_time(r["time"]) for r in actions
                      if r["payload"].get("operation") == "drain_node" and r["payload"]["status"] == "done")
    resume = next(r for r in actions
                  if r["payload"].get("operation") == "resume_node" and r["payload"]["status"] == "done")
    assert resume["payload"]["step"] == f"resume_node:{LEMON}"
    assert harness.parse_time(resume["time"]) - drained_at >= UNDRAIN_AFTER_S
    # the second drain may land just after our return and before the sweep that holds it (a repeat
    # offender): wait until the node is either back in service or held
    deadline = time.monotonic() + WAIT_S
    while True:
        repeat = [r for r in setup.runner.audit() if r["kind"] == "action"
                  and r["payload"].get("operation") == "node-repeat-offender" and r["payload"].get("node") == LEMON]
        lemon = _node(setup.cluster, LEMON)
        if repeat or "DRAIN" not in lemon["State"] or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    if repeat:  # held for repair: still drained, by us
        assert "DRAIN" in lemon["State"] and lemon.get("Reason", "").startswith("trainguard:")
    else:
        assert "DRAIN" not in lemon["State"]

    human = _node(setup.cluster, HUMAN_DRAINED)
    assert "DRAIN" in human["State"] and human.get("Reason", "").startswith("maintenance")
    every = setup.runner.audit()
    assert not [r for r in every if r["kind"] == "action" and r["payload"].get("operation") == "resume_node"
                and r["payload"]["arguments"].get("node") == HUMAN_DRAINED]
