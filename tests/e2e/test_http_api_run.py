"""End to end on real Slurm: ``trainguard run --http-token-file`` serves what its loop sees.

A Monitor-mode runner with a token file (one read token, one write token) watches a job that
fails with a GPU Xid on one node. Through the HTTP API, as an outside client would:

- the live stream (subscribed right after submitting) delivers the job's anomaly as it is written;
- ``/api/v1/workloads`` lists the job with its state, attempt, policy and effective mode (monitor);
- ``/api/v1/workloads/{id}`` shows attempt 0's timeline anomaly -> verdict -> advice -> action ->
  outcome, with the evidence line's pattern and the suspect node;
- ``/api/v1/audit?workload=ID`` items are exactly the lines of ``trainguard audit --format json``;
- health says the engine runs and reaches Slurm and the store; a read token cannot switch a policy,
  a write token can, and the switch is in the audit log with who did it.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

READ = "e2e-read-token-0123456789"
WRITE = "e2e-write-token-0123456789"
JOB_TIMEOUT = 180.0


def call(url: str, *, token: str | None = None, body: Any = None, timeout: float = 30) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers |= {"Content-Type": "application/json", "X-Trainguard-Request": "1"}
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def api(base: str, path: str, token: str = READ, **params: Any) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    status, body = call(base + path + query, token=token)
    assert status == 200, (path, status, body)
    return body


def test_run_serves_its_workloads_timeline_audit_and_live_stream(slurm_cluster: SlurmCluster, e2e_dir: Path) -> None:
    directory = e2e_dir / "trainguard-api"
    directory.mkdir(parents=True, exist_ok=True)
    policy, policy_name = harness.isolated_policy(directory, spec=harness.NO_LEMONS)
    tokens = directory / "tokens"
    tokens.write_text(f"{READ} read\n{WRITE} write\n")
    runner = harness.Trainguard(slurm_cluster, directory, mode="monitor", policy=policy)
    runner.argv += ["--http-token-file", str(tokens)]
    runner.start()
    workdir = e2e_dir / "jobs-api"
    job_id = ""
    try:
        base = runner.http_url
        assert call(base + "/api/v1/workloads")[0] == 401
        job_id = harness.submit(slurm_cluster, workdir, job_name="e2e-api", nodes=2, steps=100, step_time=0.1,
                                log_every=5, fault="xid", fault_rank=1, fault_step=15,
                                comment=f"trainguard policy={policy_name}")
        live: list[dict[str, Any]] = []
        request = urllib.request.Request(base + "/api/v1/events", headers={"Authorization": f"Bearer {READ}"})
        with urllib.request.urlopen(request, timeout=JOB_TIMEOUT) as stream:
            assert stream.status == 200
            for raw in stream:
                line = raw.decode().rstrip("\n")
                if line.startswith("data: "):
                    record = json.loads(line.removeprefix("data: "))
                    if str(record["workload"]).endswith(f"/{job_id}"):
                        live.append(record)
                        if record["kind"] == "anomaly":
                            break
        assert live[-1]["kind"] == "anomaly" and live[-1]["payload"]["category"] == "gpu_fallen_off_bus"  # Xid 79
        workload = live[-1]["workload"]
        harness.wait_job(slurm_cluster, job_id, harness.is_final, timeout=JOB_TIMEOUT, what="final", runner=runner,
                         workdir=workdir)
        records = harness.wait_audit(runner, job_id, lambda rs: bool(harness.of_kind(rs, "outcome", 0)), timeout=60,
                                     what="outcome")

        page = api(base, "/api/v1/workloads", q=job_id, limit=50)
        item = next(i for i in page["items"] if i["workload"] == workload)
        assert (item["policy"], item["mode"], item["attempt"]) == (policy_name, "monitor", 0)
        assert item["state"] and item["anomalies"] >= 1

        detail = api(base, f"/api/v1/workloads/{workload}")
        steps = detail["attempts"][0]["timeline"]
        kinds = [s["kind"] for s in steps]
        for earlier, later in (("anomaly", "verdict"), ("verdict", "advice"), ("advice", "action"),
                               ("action", "outcome")):
            assert kinds.index(earlier) < kinds.index(later), kinds
        anomaly = steps[kinds.index("anomaly")]
        assert any(e["pattern"] for e in anomaly["evidence"]) and anomaly["suspect_nodes"]
        assert detail["attempts"][0]["nodes"], detail["attempts"][0]

        everything: list[dict[str, Any]] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"workload": workload, "order": "asc", "limit": 3}
            if cursor:
                params["cursor"] = cursor
            body = api(base, "/api/v1/audit", **params)
            everything += body["items"]
            cursor = body["next"]
            if cursor is None:
                break
        assert everything[: len(records)] == records

        health = api(base, "/api/v1/health")
        assert health["engine_running"] and health["leader"] is True
        assert health["scheduler"]["reachable"] is True and health["store"]["reachable"] is True

        url = base + f"/api/v1/policies/{policy_name}/mode"
        status, answer = call(url, token=READ, body={"mode": "Monitor"})
        assert status == 403, answer
        status, answer = call(url, token=WRITE, body={"mode": "Monitor"})
        assert status == 200, answer
        policies = api(base, "/api/v1/policies")["items"]
        mine = next(p for p in policies if p["name"] == policy_name)
        assert mine["declared_mode"] == "Monitor" and mine["mode_switched_by"].startswith("token:")
        deadline = time.monotonic() + 30
        while not [r for r in runner.audit() if r["workload"] == f"policy:{policy_name}"]:
            assert time.monotonic() < deadline, "the mode switch is not in the audit log"
            time.sleep(0.5)
    finally:
        if job_id:
            harness.cancel_if_active(slurm_cluster, job_id)
        code = runner.stop()
        if code != 0:
            print(runner.log())
    assert code == 0
