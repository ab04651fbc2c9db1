"""The chart's ServiceMonitor authenticates the way `/metrics` requires (issue 26).

The chart renders a ServiceMonitor; this test configures a real Prometheus (Debian's, from
``hack/local-prometheus.sh``) the way the Prometheus Operator turns that endpoint into a scrape job
(path, interval, ``authorization`` with the credentials read from the named Secret's key) and lets it
scrape Trainguard's real HTTP application, served with the token file of ``http.tokens``. The
Secrets are the test's: the token file holds a read token and a write token; the ServiceMonitor's own
Secret holds the read token alone. Prometheus must scrape with ``up == 1`` and store our metrics,
and the bearer the scrape sends must carry the read role only.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support import helm as helm_support
from tests.support import prometheus
from trainguard import health as health_mod
from trainguard.http import api, auth
from trainguard.http import app as http_app

pytestmark = [pytest.mark.integration, pytest.mark.helm, pytest.mark.prometheus,
              pytest.mark.timeout(helm_support.BUILD_TIMEOUT_S)]

READ = "metrics-read-token-0123456789"
WRITE = "metrics-write-token-0123456789"
SECRETS = {
    "tg-http-tokens": {"tokens": f"{READ} read\n{WRITE} write\n"},
    "tg-metrics-token": {"token": READ},
}
"""The cluster's Secrets as this test writes them: the API's token file, and the one read-only token."""


def rendered_endpoint(helm: helm_support.Helm) -> dict[str, Any]:
    docs = helm.template("--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.interval=1s",
                         "--set", "http.tokens.existingSecret=tg-http-tokens",
                         "--set", "serviceMonitor.tokenSecret.name=tg-metrics-token",
                         "--show-only", "templates/servicemonitor.yaml")
    (monitor,) = docs
    assert monitor["kind"] == "ServiceMonitor"
    (endpoint,) = monitor["spec"]["endpoints"]
    endpoint_: dict[str, Any] = endpoint
    return endpoint_


def scrape_config(endpoint: dict[str, Any], target: str, workdir: Path) -> Path:
    """The scrape job the Prometheus Operator generates for ``endpoint`` (the fields we render)."""
    job: dict[str, Any] = {"job_name": "trainguard", "metrics_path": endpoint["path"],
                           "scrape_interval": endpoint["interval"], "scrape_timeout": "1s",
                           "static_configs": [{"targets": [target]}]}
    authorization = endpoint.get("authorization")
    if authorization is not None:
        ref = authorization["credentials"]
        credentials = workdir / "credentials"
        credentials.write_text(SECRETS[ref["name"]][ref["key"]])
        job["authorization"] = {"type": authorization.get("type", "Bearer"), "credentials_file": str(credentials)}
    config = workdir / "prometheus.yml"
    config.write_text(json.dumps({"scrape_configs": [job]}))  # JSON is YAML
    return config


def query(url: str, promql: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}", timeout=5) as r:
        result: list[dict[str, Any]] = json.load(r)["data"]["result"]
    return result


async def test_prometheus_scrapes_metrics_with_the_read_only_token(helm: helm_support.Helm, tmp_path: Path) -> None:
    endpoint = rendered_endpoint(helm)
    credentials = endpoint["authorization"]["credentials"]
    assert credentials["name"] != "tg-http-tokens", "the ServiceMonitor must not send the whole token file"
    sent = SECRETS[credentials["name"]][credentials["key"]].strip()
    book = auth.load_tokens(write_file(tmp_path / "tokens", SECRETS["tg-http-tokens"]["tokens"]))
    principal = book.lookup(sent)
    assert principal is not None and principal.role == "read", "the scrape's bearer must be a read-only token"

    health = health_mod.Health()
    setup = api.mount(api.Fixed(), health, listen="0.0.0.0:8080", token_file=tmp_path / "tokens",
                      allow_action=False, operator=False)
    server = await http_app.serve(health, "127.0.0.1:0", setup=setup)
    assert server is not None
    binary = (await asyncio.to_thread(prometheus.binaries))["prometheus"]
    config = scrape_config(endpoint, server.url.removeprefix("http://"), tmp_path)
    checked = await asyncio.to_thread(subprocess.run, [str(Path(binary).with_name("promtool")), "check", "config",
                                                       str(config)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    prom = await asyncio.to_thread(prometheus.start_prometheus, binary, tmp_path, config)
    try:
        deadline = asyncio.get_running_loop().time() + 120
        while True:
            up = await asyncio.to_thread(query, prom.url, 'up{job="trainguard"}')
            ours = await asyncio.to_thread(query, prom.url, '{job="trainguard",__name__=~"trainguard_.+"}')
            if up and up[0]["value"][1] == "1" and ours:
                break
            assert asyncio.get_running_loop().time() < deadline, f"no successful scrape: up={up}"
            await asyncio.sleep(0.25)
    finally:
        await asyncio.to_thread(prom.stop)
        await server.stop()


def write_file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
