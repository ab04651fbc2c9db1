"""Fixtures of the end-to-end tier: a real ``trainguard run`` subprocess beside the local Slurm cluster.

``start_trainguard(mode, name)`` (module scope) starts the runner with a temporary SQLite audit
database and an Action-mode policy private to this session (``harness.isolated_policy``: only
jobs that name it are covered, so other people's jobs on a shared cluster are never acted on;
defaults otherwise, except lemon-node memory, see ``harness.NO_LEMONS``),
and stops every runner it started at the end of the module: SIGTERM, then SIGKILL after a
timeout. The runner's log stays in the module's temporary directory and is printed when a test
of the module failed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e import harness
from tests.support.slurm import SlurmCluster

StartTrainguard = Callable[[str, str], tuple[harness.Trainguard, str]]
"""``start_trainguard(mode, name) -> (runner, policy_name)``."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The Slurm scenarios run the PyTorch workload: skip them (only them) when torch is missing."""
    if importlib.util.find_spec("torch") is not None:
        return
    skip = pytest.mark.skip(reason="torch is not installed: pip install -e '.[workloads]'")
    here = Path(__file__).parent
    for item in items:
        if item.path.parent == here:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def e2e_dir(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """A directory per test module for the runner's files and the jobs' output (nodes see it: same host)."""
    return tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])


@pytest.fixture(scope="module")
def start_trainguard(slurm_cluster: SlurmCluster, e2e_dir: Path,
                     request: pytest.FixtureRequest) -> Iterator[StartTrainguard]:
    runners: list[harness.Trainguard] = []

    def start(mode: str, name: str) -> tuple[harness.Trainguard, str]:
        directory = e2e_dir / f"trainguard-{name}"
        directory.mkdir(parents=True, exist_ok=True)
        policy, policy_name = harness.isolated_policy(directory, spec=harness.NO_LEMONS)
        runner = harness.Trainguard(slurm_cluster, directory, mode=mode, policy=policy)
        runners.append(runner)
        runner.start()
        return runner, policy_name

    try:
        yield start
    finally:
        for runner in runners:
            code = runner.stop()
            failed = request.session.testsfailed > 0
            if code != 0 or failed:
                print(f"\n--- {runner.log_path} (exit {code}) ---\n{runner.log()}")
