"""Real Prometheus and VictoriaMetrics servers scraping DCGM-style exporters, for the tests.

The binaries come from ``hack/local-prometheus.sh path`` (Debian's ``prometheus``, VictoriaMetrics
built from the Go module registry and cached); this module starts private instances on free
loopback ports with a scrape configuration that lists the test's exporters
(``tests/support/dcgm_exporter.py``), and stops them afterwards. So the metrics reach the servers
the production way: by scraping, every second.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.dcgm_exporter import DcgmExporter
from tests.support.services import HACK_DIR, run_script

SCRAPE_INTERVAL_S = 1


def binaries() -> dict[str, str]:
    """``{"prometheus": PATH, "victoria-metrics": PATH}``, installed/built on first use."""
    out = run_script([str(HACK_DIR / "local-prometheus.sh"), "path"], timeout=900)
    paths = dict(line.split("=", 1) for line in out.splitlines() if "=" in line and not line.startswith("["))
    return {name: paths[name] for name in ("prometheus", "victoria-metrics")}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def write_scrape_config(path: Path, targets: Sequence[str]) -> None:
    listed = ", ".join(f"'{t}'" for t in targets)
    path.write_text(
        f"global: {{scrape_interval: {SCRAPE_INTERVAL_S}s, scrape_timeout: 1s}}\n"
        "scrape_configs:\n"
        "  - job_name: dcgm\n"
        "    honor_labels: true\n"
        "    static_configs:\n"
        f"      - targets: [{listed}]\n"
    )


@dataclass
class Server:
    name: str
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: server exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} not ready after {timeout:g} s:\n{log.read_text()[-2000:]}")


def start_prometheus(binary: str, workdir: Path, config: Path) -> Server:
    port = free_port()
    log = workdir / "prometheus.log"
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'prom-data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdin=subprocess.DEVNULL, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    _wait_http(f"{url}/-/ready", proc, log)
    return Server("prometheus", url, proc, log)


def start_victoriametrics(binary: str, workdir: Path, config: Path) -> Server:
    port = free_port()
    log = workdir / "victoria-metrics.log"
    # strictParse=false: the config is Prometheus's; latencyOffset: fresh samples are queryable at
    # once (by default the newest 30 s are hidden, so evidence would arrive 30 s late)
    proc = subprocess.Popen(
        [binary, f"-storageDataPath={workdir / 'vm-data'}", f"-httpListenAddr=127.0.0.1:{port}",
         f"-promscrape.config={config}", "-promscrape.config.strictParse=false", "-search.latencyOffset=1s",
         "-loggerLevel=WARN"],
        stdin=subprocess.DEVNULL, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    _wait_http(f"{url}/health", proc, log)
    return Server("victoria-metrics", url, proc, log)


def instant(url: str, promql: str) -> list[dict[str, Any]]:
    """One instant query (the test's own view of the server, independent of the code under test)."""
    query = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=5) as resp:
        body = json.load(resp)
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def wait_until(check: Callable[[], bool], what: str, timeout: float = 120) -> None:
    """Poll ``check`` until true (scrapes take their time on a busy machine)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


@dataclass
class GpuTelemetry:
    """Exporters by node name and the servers that scrape them."""

    exporters: dict[str, DcgmExporter]
    servers: dict[str, Server] = field(default_factory=dict)

    def url(self, name: str) -> str:
        return self.servers[name].url

    def wait_value(self, name: str, node: str, metric: str, gpu: int, value: float) -> None:
        """Wait until server ``name`` has scraped ``metric`` of ``node``'s GPU ``gpu`` at ``value``."""
        sel = f'{metric}{{Hostname="{node}",gpu="{gpu}"}}'

        def check() -> bool:
            return any(float(r["value"][1]) == value for r in instant(self.url(name), sel))

        wait_until(check, f"{name} to scrape {sel} == {value:g}")

    def wait_scraped_after(self, at: float, node: str, gpu: int = 0) -> None:
        """Wait until every server holds a sample of ``node``'s GPU taken after ``at`` (so a window
        starting at ``at`` has a sample before whatever the test changes next)."""
        sel = f'timestamp(DCGM_FI_DEV_XID_ERRORS{{Hostname="{node}",gpu="{gpu}"}})'
        for name in self.servers:
            wait_until(lambda name=name: any(float(r["value"][1]) > at for r in instant(self.url(name), sel)),
                       f"{name} to scrape {node} after {at:.3f}")

    def wait_all(self, node: str, metric: str, gpu: int, value: float) -> None:
        for name in self.servers:
            self.wait_value(name, node, metric, gpu, value)


@dataclass
class _Started:
    telemetry: GpuTelemetry
    stop: Callable[[], None]


def start_gpu_telemetry(workdir: Path, nodes: Sequence[str], *, gpus: int = 2,
                        servers: Sequence[str] = ("prometheus", "victoria-metrics")) -> _Started:
    """Exporters for ``nodes`` and the requested servers scraping them; ``stop`` tears all down."""
    workdir.mkdir(parents=True, exist_ok=True)
    exporters = {node: DcgmExporter(node, gpus=gpus).start() for node in nodes}
    config = workdir / "scrape.yml"
    write_scrape_config(config, [e.target for e in exporters.values()])
    telemetry = GpuTelemetry(exporters)
    paths = binaries()

    def stop() -> None:
        for server in telemetry.servers.values():
            server.stop()
        for exporter in exporters.values():
            exporter.stop()

    try:
        if "prometheus" in servers:
            telemetry.servers["prometheus"] = start_prometheus(paths["prometheus"], workdir, config)
        if "victoria-metrics" in servers:
            telemetry.servers["victoria-metrics"] = start_victoriametrics(paths["victoria-metrics"], workdir, config)
        for name in telemetry.servers:
            for node in nodes:
                telemetry.wait_value(name, node, "DCGM_FI_DEV_XID_ERRORS", 0, 0)
    except BaseException:
        stop()
        raise
    return _Started(telemetry, stop)


TELEMETRY_NODES = ("node1", "node2", "node3", "node4", "gpu-node5.cluster.example")
"""One exporter per node of the local Slurm cluster (``hack/local-slurm.sh`` names them so), and one
whose Hostname is a fully qualified name unlike its scheduler name (for the name mapping)."""


@pytest.fixture(scope="session")
def gpu_telemetry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GpuTelemetry]:
    """DCGM-style exporters for node1..node4, scraped every second by a real Prometheus and a real
    VictoriaMetrics (private instances on free ports, stopped at the end of the session)."""
    if os.environ.get("TG_SKIP_PROMETHEUS") == "1":
        pytest.skip("TG_SKIP_PROMETHEUS=1")
    started = start_gpu_telemetry(tmp_path_factory.mktemp("gpu-telemetry"), TELEMETRY_NODES)
    try:
        yield started.telemetry
    finally:
        started.stop()
