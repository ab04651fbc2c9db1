"""What the Slinky end-to-end tests share: ``trainguard operator`` as a subprocess over SchedMD's
slurm-operator v1.0.1 and Slurm 26.05 (``hack/local-kube.sh up --cluster --slinky``).

The operator runs as in production with ``--scheduler slurm-local --slinky-namespace slinky``, with a
token of its ServiceAccount ``trainguard-system/trainguard`` and the shipped RBAC
(``manifests/base``, ``manifests/slinky``; the pods RoleBinding bound in the namespace ``slinky``), so a
missing permission fails the tests. Its policy is a ``RecoveryPolicy`` applied with ``kubectl apply``
in a fresh namespace it serves; a Slurm job opts in with ``--comment="trainguard policy=NAME"``.

The job is a 2-node job on the NodeSet's three Slurm nodes (one task per node, ``srun``); on its first
attempt, once the operator has read its first lines (``start_job``: a job first seen already ended is
never acted on, by design), the task on its second node prints an Xid 79 kernel line naming that
node and fails. The
requeue without that node runs on the two others and completes. (A job holding all three could not
be requeued without one: Slurm shows no smaller node count it would accept, and the policy refuses
an exclusion that leaves fewer nodes than the job holds, with its reason recorded.)

Every test leaves the shared cluster as it found it: our cordons lifted (slurm-operator then returns
the Slurm node), its jobs cancelled.
"""

from __future__ import annotations

import json
import re
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.e2e.kube import operator_process as op
from tests.e2e.kube_cluster.harness import lines_read
from tests.support import slinky as sl
from tests.support.slurm import expand_hostlist
from trainguard.k8s import slinky

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[3]
OPERATOR_NS = "trainguard-system"
SERVICE_ACCOUNT = "trainguard"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NS}:{SERVICE_ACCOUNT}"
WAIT_S = 240.0
"""Submit -> the state checked: a job here runs a few seconds, a requeued one restarts after a few
more; generous for two shared, loaded cores. Every wait names what it waited for."""
WRITE_TOKEN = secrets.token_hex(16)
POLICY = """apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {{name: {name}, namespace: {ns}}}
spec:
  mode: {mode}
  detection: {{settle: 1s}}
  exclusion: {{lemonNodeThreshold: 1, drainLemonNodes: true}}
  actions: {{allowed: [requeue, stop, cordonNode]}}
  blastRadius: {{maxDrainedShare: 0.5}}
"""
"""One Xid makes its node a lemon (threshold 1): the advice requeues without it and takes it out of
service, on Slinky by a cordon of its Kubernetes node (``cordonNode``). ``undrainAfter`` keeps its
default (1 d): the node comes back by the undo."""
JOB = """#!/bin/bash
#SBATCH --comment="trainguard policy={policy}"
#SBATCH --job-name={name}
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output={workdir}/slurm-%j.out
echo "attempt ${{SLURM_RESTART_COUNT:-0}} on $SLURM_JOB_NODELIST" >> {workdir}/attempts-$SLURM_JOB_ID.txt
srun bash -c '
echo "iteration 1 on $SLURMD_NODENAME"
if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then
  for i in $(seq 600); do [ -e {workdir}/go-$SLURM_JOB_ID ] && break; sleep 0.5; done
fi
if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ] && [ "$SLURM_NODEID" = 1 ]; then
  echo "$(date "+%b %d %H:%M:%S") $SLURMD_NODENAME kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=$$, name=python, \
GPU has fallen off the bus." >&2
  exit 1
fi
echo "iteration 2 on $SLURMD_NODENAME"'
"""
HTTP_RE = re.compile(r"HTTP endpoints on (?P<url>http://\S+) ")


def wait(what: str, probe: Callable[[], T | None], timeout: float = WAIT_S,
         diagnose: Callable[[], str] = lambda: "") -> T:
    """The first truthy result of ``probe``, polled twice a second; fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}\n{diagnose()}")
        time.sleep(0.5)


@dataclass
class Scene:
    """One test's namespace, policy, job directory and operator processes on the Slinky cluster."""

    cluster: sl.SlinkyCluster
    namespace: str
    policy: str
    workdir: Path
    home: Path
    sa_kubeconfig: Path
    db: Path
    lemon: str = ""
    """The Slurm node whose task printed the Xid (``lemon_of``)."""
    jobs: list[str] = field(default_factory=list)
    processes: list[op.OperatorProcess] = field(default_factory=list)

    @property
    def db_url(self) -> str:
        return f"sqlite+aiosqlite:///{self.db}"

    # ---- the operator ------------------------------------------------------------------------
    def operator(self, name: str = "operator") -> op.OperatorProcess:
        """``trainguard operator --scheduler slurm-local --slinky-namespace slinky --mode action`` (not
        started), serving this scene's namespace, with its HTTP API behind a write token."""
        tokens = self.home / "tokens"
        tokens.write_text(f"{WRITE_TOKEN} write\n")
        args = ["--scheduler", "slurm-local", "--slinky-namespace", sl.NAMESPACE, "--mode", "action",
                "--namespace", self.namespace, "--db", self.db_url, "--poll", "0.5", "--status-interval", "0.5",
                "--http-listen", "127.0.0.1:0", "--http-token-file", str(tokens)]
        env = op.operator_env(self.sa_kubeconfig, self.cluster.env, self.home)
        env["PATH"] = f"{self.cluster.env['TG_SLURM_BIN']}:{env.get('PATH', '')}"  # the 26.05 root's commands
        process = op.OperatorProcess(args, env, self.home / f"{name}.log")
        self.processes.append(process)
        return process

    def diagnose(self) -> str:
        return "\n".join(f"--- {p.log.name} ---\n{p.tail()}" for p in self.processes)

    def http_url(self, process: op.OperatorProcess) -> str:
        return str(wait("the operator's HTTP address", lambda: (m := HTTP_RE.search(process.tail(400))) and m["url"],
                        60, self.diagnose))

    def post(self, process: op.OperatorProcess, path: str) -> tuple[int, dict[str, Any]]:
        """A POST of the HTTP API with the write token (and the CSRF header it asks for)."""
        request = urllib.request.Request(
            self.http_url(process) + path, data=b"{}", method="POST",
            headers={"Authorization": f"Bearer {WRITE_TOKEN}", "Content-Type": "application/json",
                     "X-Trainguard-Request": "1"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    # ---- Slurm ------------------------------------------------------------------------------
    def start_job(self, name: str) -> tuple[str, str, str]:
        """Submit the job; once the operator has read its first lines, let its first attempt go on to
        the Xid. Returns the job id, its workload id and the lemon node."""
        script = self.workdir / f"{name}.sh"
        script.write_text(JOB.format(policy=self.policy, name=name, workdir=self.workdir))
        job_id = self.cluster.run("sbatch", "--parsable", str(script)).strip().split(";")[0]
        self.jobs.append(job_id)
        workload, lemon = self.workload(job_id), self.lemon_of(job_id)
        wait(f"the operator reading job {job_id}'s output", lambda: lines_read(self.db, workload) >= 1,
             diagnose=self.diagnose)
        (self.workdir / f"go-{job_id}").touch()
        return job_id, workload, lemon

    def workload(self, job_id: str) -> str:
        cluster = self.cluster.run("scontrol", "show", "config")
        match = re.search(r"^ClusterName\s*=\s*(\S+)", cluster, re.MULTILINE)
        assert match, "no ClusterName in scontrol show config"
        return f"slurm/{match.group(1)}/{job_id}"

    def attempts(self, job_id: str) -> list[list[str]]:
        """The nodes of each attempt so far, from the line ``attempt N on NODELIST`` the batch script wrote."""
        path = self.workdir / f"attempts-{job_id}.txt"
        lines = path.read_text().splitlines() if path.is_file() else []
        return [expand_hostlist(line.split(" on ", 1)[1]) for line in lines]

    def lemon_of(self, job_id: str) -> str:
        """The node whose task prints the Xid: the second node of the first attempt."""
        first = wait(f"job {job_id}'s first attempt", lambda: self.attempts(job_id), diagnose=self.diagnose)[0]
        assert len(first) == 2 and set(first) <= set(sl.SLURM_NODES), first
        self.lemon = first[1]
        return self.lemon

    def output(self, job_id: str) -> str:
        path = self.workdir / f"slurm-{job_id}.out"
        return path.read_text(errors="replace") if path.is_file() else ""

    def final(self, job_id: str) -> dict[str, str] | None:
        """The job's scontrol record once it is finished (COMPLETED, FAILED, ...), else None."""
        job = self.cluster.slurm_job(job_id)
        return job if job.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL") else None

    # ---- the lemon node on both sides ---------------------------------------------------------
    def kube_node(self, slurm_node: str = "") -> dict[str, Any]:
        """The Kubernetes node behind ``slurm_node`` (default: the lemon)."""
        pod = slurm_node or self.lemon
        return dict(json.loads(self.cluster.kubectl("get", "node", self.cluster.kube_node_of(pod), "-o", "json")))

    def drained_by_slurm_operator(self) -> dict[str, str] | None:
        node = self.cluster.slurm_node(self.lemon)
        return node if "DRAIN" in node.get("State", "") and node.get("Reason", "").startswith(
            "slurm-operator: trainguard:") else None

    def in_service(self, slurm_node: str = "") -> dict[str, str] | None:
        node = self.cluster.slurm_node(slurm_node or self.lemon)
        return node if "DRAIN" not in node.get("State", "") else None

    def all_in_service(self) -> bool:
        """Every Slurm node of the NodeSet undrained and every Kubernetes node behind them uncordoned."""
        return all(self.in_service(n) and uncordoned(self.kube_node(n)) for n in sl.SLURM_NODES)


def uncordoned(node: dict[str, Any]) -> bool:
    annotations = node["metadata"].get("annotations") or {}
    return not node["spec"].get("unschedulable") and slinky.CORDON_REASON_ANNOTATION not in annotations


def install_operator_access(cluster: sl.SlinkyCluster) -> None:
    """Our CRDs, the operator's namespace, ServiceAccount and RBAC as shipped; the Slinky pods
    RoleBinding (``manifests/slinky/rolebinding.yaml``, written for a namespace ``slurm``) bound in
    ``slinky``."""
    cluster.kubectl("apply", "-k", str(REPO / "crds"))
    for crd in ("recoverypolicies.trainguard.dev", "workloadrecoveries.trainguard.dev"):
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    base, shipped = REPO / "manifests" / "base", REPO / "manifests" / "slinky"
    cluster.kubectl("apply", "-f", str(base / "namespace.yaml"), "-f", str(base / "serviceaccount.yaml"),
                    "-f", str(base / "rbac.yaml"), "-f", str(shipped / "rbac.yaml"))
    binding = (shipped / "rolebinding.yaml").read_text().replace("namespace: slurm\n", f"namespace: {sl.NAMESPACE}\n")
    assert f"namespace: {sl.NAMESPACE}\n" in binding, binding
    cluster.kubectl("apply", "-f", "-", input=binding)


def leave_as_found(scene: Scene) -> None:
    """Stop the operators, cancel the jobs, lift a cordon of ours left on the lemon's node and wait
    until slurm-operator has returned the Slurm node (the next test starts from a NodeSet in service)."""
    codes = [p.stop() for p in scene.processes]
    for job_id in scene.jobs:
        scene.cluster.run("scancel", job_id)
    for name in sl.SLURM_NODES:
        node = scene.kube_node(name)
        if slinky.is_ours(node):
            patch = slinky.uncordon_patch(None)
            scene.cluster.kubectl("patch", "node", node["metadata"]["name"], "--type=merge", "-p", json.dumps(patch))
    wait("slurm-operator to return the NodeSet's nodes to service", scene.all_in_service, diagnose=scene.diagnose)
    scene.cluster.kubectl("delete", "namespace", scene.namespace, "--wait=false")
    assert all(code in (0, None, -9) for code in codes), f"exit codes {codes}\n{scene.diagnose()}"


@pytest.fixture
def scene(slinky_cluster: sl.SlinkyCluster, tmp_path: Path) -> Iterator[Scene]:
    cluster = slinky_cluster
    install_operator_access(cluster)
    namespace = f"tg-slinky-{secrets.token_hex(4)}"
    cluster.kubectl("create", "namespace", namespace)
    # the namespace stands in for the operator's own (its WorkloadRecovery objects, its pause
    # ConfigMap): bound there as manifests/base binds trainguard-system
    cluster.kubectl("create", "rolebinding", "trainguard-operator-namespace", "-n", namespace,
                    "--clusterrole=trainguard-operator-namespace", f"--serviceaccount={OPERATOR_NS}:{SERVICE_ACCOUNT}")
    workdir, home = tmp_path / "jobs", tmp_path / "home"
    for path in (workdir, home):
        path.mkdir()
    workdir.chmod(0o777)  # the job runs as its submitter on the host slurmds; world-writable as in the other tiers
    sa_kubeconfig = cluster.kube.service_account_kubeconfig(SERVICE_ACCOUNT, OPERATOR_NS, tmp_path / "sa-kubeconfig")
    current = Scene(cluster, namespace, f"slinky-e2e-{secrets.token_hex(3)}", workdir, home, sa_kubeconfig,
                    tmp_path / "audit.db")
    assert current.all_in_service(), "the NodeSet's nodes are not all in service at the start"
    try:
        yield current
    finally:
        leave_as_found(current)


def apply_policy(scene: Scene, mode: str) -> None:
    scene.cluster.kubectl("apply", "-f", "-", input=POLICY.format(name=scene.policy, ns=scene.namespace, mode=mode))
