"""The real node's volume provisioner (hack/lib/real-node.sh): serves the default StorageClass
``real-node-local`` with directories on the node (hostPath volumes pinned to it by node affinity).

A claim of that class, once the scheduler has picked the real node for its first pod
(``WaitForFirstConsumer``: annotation ``volume.kubernetes.io/selected-node``), gets a directory
``VOLUMES/<claim uid>`` (mode 0777: pods run as any uid) and a PersistentVolume bound to it; the
controller-manager's binder does the rest. A released volume (reclaim policy Delete) loses its
directory and its PersistentVolume. It polls the API with kubectl every second: the simulated
cluster is small, and a watch would add nothing a test could see.

Usage: python3 provisioner.py KUBECONFIG KUBECTL NODE VOLUMES_DIR
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

CLASS = "real-node-local"
PROVISIONER = "trainguard.invalid/real-node-hostpath"


def kubectl(kubectl_bin: str, kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run([kubectl_bin, "--kubeconfig", kubeconfig, *args], input=stdin, capture_output=True,
                          text=True, timeout=30, check=False)
    if done.returncode != 0:
        print(f"kubectl {' '.join(args)}: {done.stderr.strip()}", flush=True)
        return ""
    return done.stdout


def provision(claim: dict, node: str, volumes: Path) -> dict:
    meta = claim["metadata"]
    path = volumes / meta["uid"]
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o777)
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"pvc-{meta['uid']}", "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
        "spec": {
            "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
            "accessModes": claim["spec"].get("accessModes", ["ReadWriteOnce"]),
            "persistentVolumeReclaimPolicy": "Delete", "storageClassName": CLASS,
            "volumeMode": "Filesystem",
            "hostPath": {"path": str(path), "type": "Directory"},
            "claimRef": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
        },
    }


def step(kubectl_bin: str, kubeconfig: str, node: str, volumes: Path) -> None:
    claims = json.loads(kubectl(kubectl_bin, kubeconfig, "get", "pvc", "-A", "-o", "json") or '{"items": []}')
    for claim in claims["items"]:
        annotations = claim["metadata"].get("annotations", {})
        if (claim["spec"].get("storageClassName") == CLASS and claim.get("status", {}).get("phase") == "Pending"
                and not claim["spec"].get("volumeName")
                and annotations.get("volume.kubernetes.io/selected-node") == node):
            volume = provision(claim, node, volumes)
            if kubectl(kubectl_bin, kubeconfig, "create", "-f", "-", stdin=json.dumps(volume)):
                print(f"provisioned {volume['metadata']['name']} for {claim['metadata']['namespace']}/"
                      f"{claim['metadata']['name']}", flush=True)
    pvs = json.loads(kubectl(kubectl_bin, kubeconfig, "get", "pv", "-o", "json") or '{"items": []}')
    for pv in pvs["items"]:
        ours = pv["metadata"].get("annotations", {}).get("pv.kubernetes.io/provisioned-by") == PROVISIONER
        if ours and pv.get("status", {}).get("phase") == "Released":
            path = Path(pv["spec"]["hostPath"]["path"])
            if path.parent == volumes:
                shutil.rmtree(path, ignore_errors=True)
            kubectl(kubectl_bin, kubeconfig, "delete", "pv", pv["metadata"]["name"], "--wait=false")
            print(f"deleted {pv['metadata']['name']}", flush=True)


def main(kubeconfig: str, kubectl_bin: str, node: str, volumes: str) -> None:
    root = Path(volumes)
    root.mkdir(parents=True, exist_ok=True)
    while True:
        step(kubectl_bin, kubeconfig, node, root)
        time.sleep(1)


if __name__ == "__main__":
    main(*sys.argv[1:5])
