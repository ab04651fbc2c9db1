"""Each pytest worker its own services: state directories and ports by slot.

``hack/test.sh`` runs the suite in several pytest-xdist workers, and ``.ci/run`` runs the Slurm
24.11 tier beside the first pass. The tests wait on Slurm, an apiserver or a browser far more than
they compute, so the workers overlap those waits; but a test that drains a node, stops
slurmctld or counts jobs must not see another worker's. So every worker gets a *slot* and,
with it, its own Slurm cluster, PostgreSQL, MariaDB, kube-apiserver and simulated cluster:
each hack script already takes its state directory and ports from the environment, and this
module sets them before any fixture reads them.

The slot is ``TG_TEST_SLOT`` (default 0: the second pass of ``.ci/run`` sets 5) plus the
worker's index (``gw0`` -> 0). Slot 0 changes nothing: a developer's single pytest uses the
defaults and reuses a cluster already running there. Slot ``n`` adds ``-s<n>`` to each state
directory and ``1000 * n`` to each port. Every default port is distinct modulo 1000 and no
service spans 1000 ports (Slurm's doctor clusters use +100 and +200; the simulated cluster
+0 .. +32), so no two slots ever share a port.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import MutableMapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PORT_STRIDE = 1000
FIRST_OF_OTHER_RUN = 5
"""``TG_TEST_SLOT`` of a second pytest run beside the first (``.ci/run``): room for 5 workers."""

PORTS = {
    "TG_SLURM_CTLD_PORT": 16817, "TG_SLURM_NODE_PORT_BASE": 17000, "TG_SLURM_REST_PORT": 16820,
    "TG_PG_PORT": 15432, "TG_MYSQL_PORT": 13306,
    "TG_KUBE_API_PORT": 16443, "TG_ETCD_PORT": 12379, "TG_ETCD_PEER_PORT": 12380,
    "TG_SIM_PORT_BASE": 20250, "TG_AM_PORT": 19093,
}
"""Every port variable the hack scripts read, with the script's default."""


def _directories(env: MutableMapping[str, str]) -> dict[str, Path]:
    local = REPO_ROOT / ".local"
    return {
        "TG_SLURM_DIR": local / ("slurm-root" if env.get("TG_SLURM_ROOT") else "slurm"),
        "TG_PG_DIR": local / "postgres", "TG_MYSQL_DIR": local / "mysql",
        "TG_KUBE_DIR": local / "kube", "TG_SIM_KUBE_DIR": local / "kube-sim",
        "TG_AM_DIR": local / "alertmanager", "TG_SLINKY_DIR": local / "slinky",
    }


def slot(env: MutableMapping[str, str]) -> int:
    """``TG_TEST_SLOT`` plus this process's xdist worker index (0 outside xdist)."""
    base = int(env.get("TG_TEST_SLOT") or 0)
    worker = re.fullmatch(r"gw(\d+)", env.get("PYTEST_XDIST_WORKER", ""))
    return base + (int(worker[1]) if worker else 0)


def assign(env: MutableMapping[str, str], n: int | None = None) -> int:
    """Point the services in ``env`` (normally ``os.environ``) at slot ``n`` (default: this
    process's :func:`slot`); returns the slot.

    Values already in ``env`` are the base the slot is added to, so a developer's ``TG_SLURM_DIR``
    or ``TG_PG_PORT`` is kept by slot 0 and shifted for the others."""
    n = slot(env) if n is None else n
    if n == 0:
        return 0
    for name, default in PORTS.items():
        env[name] = str(int(env.get(name) or default) + PORT_STRIDE * n)
    for name, default_dir in _directories(env).items():
        env[name] = f"{env.get(name) or default_dir}-s{n}"
    env["TG_TEST_SLOT_ASSIGNED"] = str(n)
    return n


def assign_once() -> int:
    """:func:`assign` on ``os.environ``, once per process (a re-imported conftest must not shift twice)."""
    done = os.environ.get("TG_TEST_SLOT_ASSIGNED")
    if done is not None:
        return int(done)
    return assign(os.environ)


def main(argv: list[str]) -> int:
    """``python -m tests.support.workers env N``: slot ``N``'s variables as ``export`` lines, for
    hack/test.sh to stop what a killed run left behind in every slot it used."""
    if len(argv) != 2 or argv[0] != "env" or not argv[1].isdigit():
        print("usage: python -m tests.support.workers env SLOT", file=sys.stderr)
        return 2
    env = dict(os.environ)
    assign(env, int(argv[1]))
    for name in [*PORTS, *_directories(env)]:
        if name in env:
            print(f"export {name}={shlex.quote(env[name])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
