"""How ``hack/test.sh`` hands the suite to its pytest-xdist workers.

A whole test file goes to one worker, as with ``--dist loadfile``: module fixtures (a runner,
a set of concurrent recovery scenarios) are set up once, not once per worker that happens to
get one of their tests. The simulated cluster's tests (every ``kube_cluster`` folder) go to one
worker together: that cluster (controller-manager, scheduler, kwok, JobSet and the
training-operator beside their own apiserver) is the heaviest service to start and to keep
running on two cores, so only one worker starts it.

The longest groups go first (longest-processing-time first keeps the workers' finishing times
close): the simulated cluster's, then the end-to-end files, the integration files, and the
unit tests last, whose many short files fill in the end of every worker's run.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from xdist.scheduler import LoadScopeScheduling

SIMULATED_CLUSTER = "kube_cluster"


def _folders(nodeid: str) -> tuple[str, ...]:
    return PurePosixPath(nodeid.split("::", 1)[0]).parts[:-1]


def scope(nodeid: str) -> str:
    """The unit of work ``nodeid`` belongs to: its file, or the simulated cluster's group."""
    if SIMULATED_CLUSTER in _folders(nodeid):
        return f"the simulated cluster ({SIMULATED_CLUSTER} folders)"
    return nodeid.split("::", 1)[0]


def rank(nodeid: str) -> int:
    """Where ``nodeid``'s group goes in the queue: lower first."""
    folders = _folders(nodeid)
    if SIMULATED_CLUSTER in folders:
        return 0
    if "e2e" in folders:
        return 1
    if "integration" in folders:
        return 2
    return 3


class ByFileAndService(LoadScopeScheduling):
    """``--dist loadscope`` with :func:`scope` as the scope."""

    def _split_scope(self, nodeid: str) -> str:
        return scope(nodeid)
