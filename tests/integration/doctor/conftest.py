"""Fixtures of the ``trainguard doctor`` tests: real Slurm clusters beside the main one, configured
the way the loop cannot work with (``JobRequeue=0``) or with accounting in a real slurmdbd (for
``AccountingStoreFlags``), and DCGM-style metrics of the main cluster's nodes in real servers."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.support import prometheus, services, slurm
from tests.support.doctor import AccountingCluster, BrokenCluster
from tests.support.mysql import MysqlServer


@pytest.fixture(scope="session")
def slurm_cluster_without_requeue() -> Iterator[BrokenCluster]:
    """A one-node cluster beside the main one (ports +100, its own state folder) with JobRequeue=0."""
    if os.environ.get("TG_SKIP_SLURM") == "1":
        pytest.skip("TG_SKIP_SLURM=1")
    directory = Path(str(slurm.state_dir()) + "-norequeue")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SLURMRESTD_"))}
    env.update({
        "TG_SLURM_DIR": str(directory), "TG_SLURM_NODES": "1", "TG_SLURM_JOB_REQUEUE": "0",
        "TG_SLURM_CTLD_PORT": str(int(os.environ.get("TG_SLURM_CTLD_PORT", "16817")) + 100),
        "TG_SLURM_NODE_PORT_BASE": str(int(os.environ.get("TG_SLURM_NODE_PORT_BASE", "17000")) + 100),
        "TG_SLURM_REST_PORT": str(int(os.environ.get("TG_SLURM_REST_PORT", "16820")) + 100),
    })
    try:
        with services.shared_service(slurm.SCRIPT, directory, env):
            values = services.read_env_file(directory / "env")
            client = {"SLURM_CONF": values["SLURM_CONF"]}
            if values.get("TG_SLURM_BIN"):
                client["PATH"] = os.environ["PATH"]
            yield BrokenCluster(client)
    except services.ServiceError as exc:
        pytest.fail(f"second local Slurm cluster: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def cluster_gpu_telemetry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[prometheus.GpuTelemetry]:
    """DCGM-style exporters for exactly the local cluster's nodes (node1..node4), scraped by a real
    Prometheus and a real VictoriaMetrics: the good setup."""
    if os.environ.get("TG_SKIP_PROMETHEUS") == "1":
        pytest.skip("TG_SKIP_PROMETHEUS=1")
    started = prometheus.start_gpu_telemetry(tmp_path_factory.mktemp("doctor-gpu"),
                                             [f"node{i}" for i in range(1, 5)])
    try:
        yield started.telemetry
    finally:
        started.stop()


def _install_slurmdbd() -> None:
    """slurmdbd from Debian's packages, installed from Debian as hack/local-mysql.sh installs its server."""
    if shutil.which("slurmdbd"):
        return
    if os.geteuid() != 0:
        pytest.fail("slurmdbd is not installed (apt-get install slurmdbd), and we are not root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True, timeout=600)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "slurmdbd"], check=True, env=env,
                   capture_output=True, timeout=900)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def slurm_cluster_with_accounting(mysql_server: MysqlServer) -> Iterator[AccountingCluster]:
    """Ports +200 beside the main cluster; slurmdbd on the slurmctld port + 2. A slurmctld configured
    for slurmdbd refuses to start without it (no TRES), so the cluster comes up without accounting
    first (for its munge), then slurmdbd, then the accounting configuration."""
    if os.environ.get("TG_SKIP_SLURM") == "1":
        pytest.skip("TG_SKIP_SLURM=1")
    _install_slurmdbd()
    database = sa.make_url(mysql_server.admin_url)
    directory = Path(str(slurm.state_dir()) + "-accounting")
    ctld = int(os.environ.get("TG_SLURM_CTLD_PORT", "16817")) + 200
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SLURMRESTD_"))}
    env.update({
        "TG_SLURM_DIR": str(directory), "TG_SLURM_NODES": "1", "TG_SLURM_CTLD_PORT": str(ctld),
        "TG_SLURM_NODE_PORT_BASE": str(int(os.environ.get("TG_SLURM_NODE_PORT_BASE", "17000")) + 200),
        "TG_SLURM_REST_PORT": str(int(os.environ.get("TG_SLURM_REST_PORT", "16820")) + 200),
    })
    cluster = AccountingCluster({}, env, ctld + 2)
    dbd: subprocess.Popen[bytes] | None = None
    try:
        services.run_script([str(slurm.SCRIPT), "up"], env)
        values = services.read_env_file(directory / "env")
        conf = directory / "etc" / "slurmdbd.conf"
        conf.write_text("\n".join([
            "AuthType=auth/munge", f"AuthInfo=socket={directory / 'run' / 'munge.socket'}",
            "DbdHost=localhost", "DbdAddr=127.0.0.1", f"DbdPort={cluster.dbd_port}", "SlurmUser=root",
            f"PidFile={directory / 'run' / 'slurmdbd.pid'}", f"LogFile={directory / 'log' / 'slurmdbd.log'}",
            "StorageType=accounting_storage/mysql", f"StorageHost={database.host}", f"StoragePort={database.port}",
            "StorageUser=root", "StorageLoc=slurm_acct_db", ""]))
        conf.chmod(0o600)  # slurmdbd refuses a readable configuration (it may hold the storage password)
        log = (directory / "log" / "slurmdbd.out").open("wb")
        dbd = subprocess.Popen(["slurmdbd", "-D"], env={**env, "SLURM_CONF": values["SLURM_CONF"]},
                               stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while not _listening(cluster.dbd_port):
            if dbd.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"slurmdbd did not start: {(directory / 'log' / 'slurmdbd.log').read_text()[-2000:]}")
            time.sleep(0.2)
        cluster.env.update({"SLURM_CONF": values["SLURM_CONF"]})
        if values.get("TG_SLURM_BIN"):
            cluster.env["PATH"] = os.environ["PATH"]
        yield cluster
    except services.ServiceError as exc:
        pytest.fail(f"local Slurm cluster with accounting: {exc}", pytrace=False)
    finally:
        services.script_succeeds([str(slurm.SCRIPT), "down", "--wipe"], env, timeout=300)
        if dbd is not None and dbd.poll() is None:
            dbd.send_signal(signal.SIGTERM)
            try:
                dbd.wait(timeout=30)
            except subprocess.TimeoutExpired:
                dbd.kill()
                dbd.wait(timeout=30)
