"""pytest plugin: the simulated Kubernetes cluster (`hack/local-kube.sh up --cluster`).

On top of the real etcd + kube-apiserver of ``tests.support.kube`` it runs the real
kube-controller-manager and kube-scheduler, kwok (fake nodes ``kwok-node-1``..``kwok-node-4``,
8 ``nvidia.com/gpu`` each, pods driven through kwok's upstream stages), the JobSet controller
and the Kubeflow training-operator (PyTorchJob). Nothing here fakes a controller: a test
changes what a kubelet would report (a pod fails, completes, a node goes NotReady) through
kwok's stage labels and annotations, and the real controllers react.

The session fixture ``sim_cluster`` reuses a cluster already up on the same ports
(``TG_KUBE_API_PORT``, ``TG_SIM_PORT_BASE``, ...), or starts one and stops it when the last
session out leaves (``tests.support.services``). Tests that use it carry the markers ``kube``
and ``kube_cluster``: ``TG_SKIP_KUBE=1`` skips them with every kube test,
``TG_SKIP_SIM_CLUSTER=1`` skips only these.

Registered in tests/conftest.py:  pytest_plugins = [..., "tests.support.kube_cluster"]
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from . import services
from .kube import BUILD_TIMEOUT_S, REPO_ROOT, SCRIPT, LocalKube, unique_name

T = TypeVar("T")

NODES = tuple(f"kwok-node-{i}" for i in range(1, 5))
"""The fake nodes `up --cluster` creates (a contract: tests and docs name them)."""

GPU = "nvidia.com/gpu"
STAGE = "stage.kwok.x-k8s.io"
FAIL_LABEL = f"pod-container-running-failed.{STAGE}"
COMPLETE_LABEL = f"pod-complete.{STAGE}"
NODE_NOT_READY_LABEL = f"node-not-ready.{STAGE}"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_RESTART_LABEL = "jobset.sigs.k8s.io/restart-attempt"
PYTORCHJOB_NAME_LABEL = "training.kubeflow.org/job-name"
PYTORCHJOB_ROLE_LABEL = "training.kubeflow.org/replica-type"

# Starting every component from a warm cache takes seconds; waiting on a busy 2-core machine
# for a controller's reaction can take much longer than on an idle one.
DEFAULT_WAIT_S = 120.0


class WaitTimeout(AssertionError):
    """A condition a test waited for did not hold in time (an assertion failure, with what was last seen)."""


def wait_until(what: str, probe: Callable[[], T | None], timeout: float = DEFAULT_WAIT_S, interval: float = 0.3) -> T:
    """Poll ``probe`` until it returns something other than None/False; return that.

    Polling a real API is the synchronisation here (no fixed sleeps): the interval only
    bounds the load on the apiserver.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        last = value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what} (last probe: {last!r})")
        time.sleep(interval)


def cri_line(text: str, stream: str = "stdout", when: datetime.datetime | None = None) -> str:
    """One line in the CRI log format kwok serves (`<RFC3339Nano> <stream> F <text>`)."""
    stamp = (when or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
    return f"{stamp} {stream} F {text}\n"


@dataclasses.dataclass(frozen=True)
class SimCluster:
    """Handle on the running simulated cluster, with helpers that act like the nodes would."""

    kube: LocalKube
    port_base: int
    pod_log_dir: Path

    @property
    def kubeconfig(self) -> Path:
        return self.kube.kubeconfig

    @property
    def kubectl_path(self) -> Path:
        return self.kube.kubectl_path

    # --- kubectl -------------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 60) -> str:
        """Run kubectl as admin; raise with its stderr on failure, return stdout."""
        done = self.kube.kubectl(*args, input=input, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def apply(self, manifest: str | dict[str, Any] | Sequence[dict[str, Any]], server_side: bool = False) -> None:
        """Apply YAML text or objects. ``server_side`` for large objects (CRDs) or field ownership."""
        if isinstance(manifest, str):
            text = manifest
        elif isinstance(manifest, dict):
            text = yaml.safe_dump(manifest, sort_keys=False)
        else:
            text = yaml.safe_dump_all(list(manifest), sort_keys=False)
        args = ["apply", "-f", "-"]
        if server_side:
            args += ["--server-side", "--force-conflicts", "--field-manager=trainguard-tests"]
        self.kubectl(*args, input=text)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object as a dict, or None when it does not exist."""
        args = ["get", kind, name, "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        done = self.kube.kubectl(*args)
        if done.returncode != 0:
            if "NotFound" in done.stderr:
                return None
            raise RuntimeError(f"kubectl get {kind} {name} failed: {done.stderr.strip()}")
        obj: dict[str, Any] = json.loads(done.stdout)
        return obj

    def list_objects(
        self, kind: str, namespace: str | None = None, selector: str | None = None
    ) -> list[dict[str, Any]]:
        args = ["get", kind, "-o", "json"]
        args += ["-n", namespace] if namespace else ["--all-namespaces"]
        if selector:
            args += ["-l", selector]
        items: list[dict[str, Any]] = json.loads(self.kubectl(*args))["items"]
        return items

    def pods(self, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        """Pods of the namespace that are not being deleted, sorted by name."""
        pods = [p for p in self.list_objects("pods", namespace, selector) if not p["metadata"].get("deletionTimestamp")]
        return sorted(pods, key=lambda p: str(p["metadata"]["name"]))

    def create_namespace(self, prefix: str = "sim") -> str:
        """A new namespace, once its ``default`` ServiceAccount exists: the apiserver's ServiceAccount
        admission refuses a pod of a namespace whose ``default`` the controller-manager has not made yet
        (it retries for about a second only)."""
        name = unique_name(prefix)
        self.kubectl("create", "namespace", name)
        self.wait(f"the default ServiceAccount of {name}", lambda: self.get("serviceaccount", "default", name))
        return name

    def delete_namespace(self, name: str, wait: float = 60) -> None:
        """Delete a namespace and wait (bounded) until it is gone, so its pods free their GPUs."""
        self.kube.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and self.get("namespace", name) is not None:
            time.sleep(0.5)

    # --- workloads -----------------------------------------------------------------------

    def jobset_manifest(
        self,
        name: str,
        namespace: str,
        replicated_jobs: Sequence[tuple[str, int, int]] = (("workers", 2, 2),),
        gpus: int = 8,
        max_restarts: int = 3,
        annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """A JobSet: each ``(name, replicas, pods_per_job)`` is a replicated job of `replicas`
        Jobs with `pods_per_job` pods each, every pod asking for `gpus` GPUs; pods fail the
        Job at once (backoffLimit 0) so the JobSet's failure policy decides, as in training."""
        jobs = [
            {
                "name": job,
                "replicas": replicas,
                "template": {
                    "spec": {
                        "parallelism": pods,
                        "completions": pods,
                        "backoffLimit": 0,
                        "template": {"spec": self._pod_spec(gpus, restart_policy="Never")},
                    }
                },
            }
            for job, replicas, pods in replicated_jobs
        ]
        return {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": _metadata(name, namespace, annotations, labels),
            "spec": {"failurePolicy": {"maxRestarts": max_restarts}, "replicatedJobs": jobs},
        }

    def create_jobset(self, name: str, namespace: str, **kwargs: Any) -> dict[str, Any]:
        manifest = self.jobset_manifest(name, namespace, **kwargs)
        self.kubectl("create", "-f", "-", input=yaml.safe_dump(manifest, sort_keys=False))
        return manifest

    def pytorchjob_manifest(
        self,
        name: str,
        namespace: str,
        workers: int = 2,
        gpus: int = 8,
        restart_policy: str = "ExitCode",
        backoff_limit: int = 3,
        annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """A PyTorchJob with one Master and `workers` Workers, each asking for `gpus` GPUs."""

        def replica(count: int) -> dict[str, Any]:
            return {
                "replicas": count,
                "restartPolicy": restart_policy,
                "template": {"spec": self._pod_spec(gpus, container="pytorch")},
            }

        return {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": _metadata(name, namespace, annotations, labels),
            "spec": {
                "runPolicy": {"backoffLimit": backoff_limit},
                "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)},
            },
        }

    def create_pytorchjob(self, name: str, namespace: str, **kwargs: Any) -> dict[str, Any]:
        manifest = self.pytorchjob_manifest(name, namespace, **kwargs)
        self.kubectl("create", "-f", "-", input=yaml.safe_dump(manifest, sort_keys=False))
        return manifest

    def create_pod(
        self, name: str, namespace: str, gpus: int = 1, node: str | None = None, labels: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """A bare pod (no controller: it stays as kwok leaves it), placed by the scheduler or
        on `node` (through a nodeSelector, so the scheduler still checks its GPUs)."""
        spec = self._pod_spec(gpus, restart_policy="Never")
        if node:
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        metadata = _metadata(name, namespace, None, labels)
        manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
        self.kubectl("create", "-f", "-", input=yaml.safe_dump(manifest, sort_keys=False))
        return manifest

    @staticmethod
    def _pod_spec(gpus: int, container: str = "main", restart_policy: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "containers": [
                {
                    "name": container,
                    "image": "pytorch/pytorch",  # never pulled: kwok runs no container
                    "command": ["torchrun", "train.py"],
                    "resources": {"limits": {GPU: str(gpus)}} if gpus else {},
                }
            ]
        }
        if restart_policy:
            spec["restartPolicy"] = restart_policy
        return spec

    # --- acting like the node --------------------------------------------------------------

    def write_pod_log(self, namespace: str, pod: str, lines: Sequence[str], container: str | None = None) -> Path:
        """Append `lines` to the pod's CRI-format log file and make kwok serve it (a `Logs`
        object named like the pod, created once). `kubectl logs [-f]` then shows them."""
        path = self.pod_log_dir / namespace / f"{pod}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        first = not path.exists()
        with path.open("a") as handle:
            for line in lines:
                handle.write(cri_line(line))
        if first:
            obj = self.get("pod", pod, namespace)
            if obj is None:
                raise RuntimeError(f"pod {namespace}/{pod} does not exist")
            containers = [container] if container else [c["name"] for c in obj["spec"]["containers"]]
            self.apply(
                {
                    "apiVersion": "kwok.x-k8s.io/v1alpha1",
                    "kind": "Logs",
                    "metadata": {"name": pod, "namespace": namespace},
                    "spec": {"logs": [{"containers": containers, "logsFile": str(path), "follow": True}]},
                }
            )
        return path

    def pod_logs(self, namespace: str, pod: str, container: str | None = None) -> str:
        """What the API serves as the pod's log (the same path as `kubectl logs`)."""
        args = ["logs", "-n", namespace, pod]
        if container:
            args += ["-c", container]
        return self.kubectl(*args)

    def fail_pod(self, namespace: str, pod: str, exit_code: int = 1, reason: str = "Error", message: str = "",
                 uid: str | None = None) -> None:
        """Make the pod's containers terminate with this exit code, reason and message
        (kwok's pod-container-running-failed stage: annotations, then its label). ``uid``: only that
        pod, not one re-created under its name since (the apiserver refuses a patch naming another uid)."""
        patch: dict[str, Any] = {
            "metadata": {
                "annotations": {
                    f"{FAIL_LABEL}/exit-code": str(exit_code),
                    f"{FAIL_LABEL}/reason": reason,
                    f"{FAIL_LABEL}/message": message,
                    f"{FAIL_LABEL}/delay": "0",
                    f"{FAIL_LABEL}/jitter-delay": "0",
                },
                "labels": {FAIL_LABEL: "true"},
            }
        }
        if uid is not None:
            patch["metadata"]["uid"] = uid
        self.kubectl("patch", "pod", pod, "-n", namespace, "--type=merge", "-p", json.dumps(patch))

    def complete_pod(self, namespace: str, pod: str) -> None:
        """Make the pod succeed (kwok's pod-complete stage, gated on its label here)."""
        self.kubectl("label", "pod", pod, "-n", namespace, f"{COMPLETE_LABEL}=true", "--overwrite")

    def set_node_ready(self, node: str, ready: bool) -> None:
        """NotReady through kwok's node-not-ready stage label; Ready again by removing it."""
        if ready:
            self.kubectl("label", "node", node, f"{NODE_NOT_READY_LABEL}-")
        else:
            self.kubectl("label", "node", node, f"{NODE_NOT_READY_LABEL}=true", "--overwrite")

    def node_ready(self, node: str) -> bool:
        obj = self.get("node", node)
        if obj is None:
            return False
        return any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in obj.get("status", {}).get("conditions", [])
        )

    # --- waiting -------------------------------------------------------------------------

    def wait(self, what: str, probe: Callable[[], T | None], timeout: float = DEFAULT_WAIT_S) -> T:
        """Wait until ``probe`` returns a value (see `wait_until`)."""
        return wait_until(what, probe, timeout)

    def wait_condition(
        self, kind: str, name: str, namespace: str | None, condition: str, status: str = "True",
        timeout: float = DEFAULT_WAIT_S,
    ) -> dict[str, Any]:
        """Wait until the object's status.conditions has `condition` with `status`; return the object."""

        def probe() -> dict[str, Any] | None:
            obj = self.get(kind, name, namespace)
            if obj is None:
                return None
            for cond in obj.get("status", {}).get("conditions") or []:
                if cond.get("type") == condition and cond.get("status") == status:
                    return obj
            return None

        return wait_until(f"{kind} {namespace}/{name} condition {condition}={status}", probe, timeout)

    def wait_pods_running(
        self, namespace: str, selector: str, count: int, timeout: float = DEFAULT_WAIT_S
    ) -> list[dict[str, Any]]:
        """Wait until exactly `count` pods match and all are Running and Ready; return them."""

        def probe() -> list[dict[str, Any]] | None:
            pods = self.pods(namespace, selector)
            running = [p for p in pods if p.get("status", {}).get("phase") == "Running" and _ready(p)]
            return running if len(pods) == count and len(running) == count else None

        return wait_until(f"{count} Running pods {selector!r} in {namespace}", probe, timeout)


def _metadata(
    name: str, namespace: str, annotations: dict[str, str] | None, labels: dict[str, str] | None
) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "annotations": annotations or {}, "labels": labels or {}}


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def port_base() -> int:
    return int(os.environ.get("TG_SIM_PORT_BASE", "20250"))


API_PORT_OFFSET = 30
"""The simulated cluster's own kube-apiserver listens on TG_SIM_PORT_BASE + 30, its etcd on + 31 and
+ 32 (the components of ``up --cluster`` use + 0 .. + 25)."""


def sim_dir() -> Path:
    """State directory of the simulated cluster's own API (TG_SIM_KUBE_DIR, default .local/kube-sim)."""
    return Path(os.environ.get("TG_SIM_KUBE_DIR", REPO_ROOT / ".local" / "kube-sim"))


def sim_env() -> dict[str, str]:
    """The environment of ``hack/local-kube.sh`` for the simulated cluster.

    It runs on its own etcd + kube-apiserver (own state directory and ports), beside the plain API
    the other kube tests use. On one shared API its controllers would act on the objects those
    tests write by hand (the JobSet controller makes its own pods, the node lifecycle controller
    evicts pods from nodes without a kubelet), so whichever tier ran second would have to skip.
    """
    base = port_base()
    return {**os.environ, "TG_KUBE_DIR": str(sim_dir()), "TG_KUBE_API_PORT": str(base + API_PORT_OFFSET),
            "TG_ETCD_PORT": str(base + API_PORT_OFFSET + 1), "TG_ETCD_PEER_PORT": str(base + API_PORT_OFFSET + 2)}


@pytest.fixture(scope="session")
def sim_cluster() -> Iterator[SimCluster]:
    """The simulated cluster for the session: reused when up on our ports, else started
    (and stopped by the last session out)."""
    for variable in ("TG_SKIP_KUBE", "TG_SKIP_SIM_CLUSTER"):
        if os.environ.get(variable) == "1":
            pytest.skip(f"{variable}=1")
    directory, env = sim_dir(), sim_env()
    try:
        # The long compile first, outside the shared lock; a no-op when cached.
        services.run_script([str(SCRIPT), "build", "--cluster"], env, timeout=BUILD_TIMEOUT_S)
        with services.shared_service(
            SCRIPT, directory, env, up_args=("--cluster",), status_args=("--cluster",)
        ):
            yield SimCluster(
                kube=LocalKube.load(directory), port_base=port_base(), pod_log_dir=directory / "cluster" / "pod-logs"
            )
    except services.ServiceError as exc:
        pytest.fail(f"simulated Kubernetes cluster: {exc}", pytrace=False)


@pytest.fixture
def sim_namespace(sim_cluster: SimCluster) -> Iterator[str]:
    """A fresh namespace for one test, deleted (and waited for, bounded) afterwards."""
    name = sim_cluster.create_namespace("sim")
    try:
        yield name
    finally:
        sim_cluster.delete_namespace(name)
