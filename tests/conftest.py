"""Root conftest: registers the service fixtures and the skip switches for service tiers.

Tests that need the real local Slurm cluster are marked ``slurm``, those that need the local
PostgreSQL ``postgres``, MySQL/MariaDB ``mysql``, those that need the local Kubernetes API ``kube``, a VictoriaLogs
server ``victorialogs``. They run by default
(the fixtures start the services); set ``TG_SKIP_SLURM=1``, ``TG_SKIP_POSTGRES=1`` or
``TG_SKIP_KUBE=1`` to skip them on a machine that cannot run them.
"""

from __future__ import annotations

import os

import pytest

from tests.support import workers

pytest_plugins = ["tests.support.slurm", "tests.support.postgres", "tests.support.kube", "tests.support.kube_cluster",
                  "tests.support.real_node", "tests.support.mysql",
                  "tests.support.victorialogs",
                  "tests.support.browser", "tests.support.prometheus", "tests.support.helm",
                  "tests.support.alertmanager", "tests.support.budget", "tests.support.slinky",
                  "tests.support.worker_times"]

SKIP_SWITCHES = {
    "slurm": "TG_SKIP_SLURM", "postgres": "TG_SKIP_POSTGRES", "kube": "TG_SKIP_KUBE", "mysql": "TG_SKIP_MYSQL",
    "mariadb": "TG_SKIP_MYSQL",
    "victorialogs": "TG_SKIP_VLOGS", "prometheus": "TG_SKIP_PROMETHEUS", "helm": "TG_SKIP_HELM",
    "kube_cluster": "TG_SKIP_SIM_CLUSTER", "alertmanager": "TG_SKIP_ALERTMANAGER", "real_node": "TG_SKIP_REAL_NODE",
    "slinky": "TG_SKIP_SLINKY",
}
"""Marker name -> environment variable that, set to 1, skips the tests carrying the marker."""


def pytest_configure(config: pytest.Config) -> None:
    """Each process that runs tests gets its slot's services (tests/support/workers.py); the
    pytest-xdist controller runs none, and its workers must inherit its environment unshifted."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return
    workers.assign_once()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from tests.support import schedule

    return schedule.ByFileAndService(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: the longest groups first (tests/support/schedule.py)
        from tests.support import schedule

        items.sort(key=lambda item: schedule.rank(item.nodeid))
    for marker, variable in SKIP_SWITCHES.items():
        if os.environ.get(variable) != "1":
            continue
        skip = pytest.mark.skip(reason=f"{variable}=1")
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)
