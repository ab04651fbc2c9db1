"""How ``hack/test.sh`` hands the suite to its pytest-xdist workers.

A whole test file goes to one worker, as with ``--dist loadfile``: module fixtures (a runner,
a set of concurrent recovery scenarios) are set up once, not once per worker that happens to
get one of their tests. The simulated cluster's tests (every ``kube_cluster`` folder) go to one
worker together: that cluster (controller-manager, scheduler, kwok, JobSet and the
training-operator beside their own apiserver) is the heaviest service to start and to keep
running on two cores, so only one worker starts it. The Slinky tests (every ``slinky`` folder:
SchedMD's slurm-operator and a Slurm 26.05 on that same cluster, ``hack/local-kube.sh up --cluster
--slinky``) belong to that group and come last in it: slurm-operator's fixed port 6820 allows one such
cluster per machine, and once it is up its NodeSet pods sit on the kwok nodes and it drains a Slurm
node behind any cordon, which the other simulated-cluster tests must not meet.

The longest groups go first (longest-processing-time first keeps the workers' finishing times
close): the simulated cluster's, then the end-to-end files, the integration files, and the
unit tests last, whose many short files fill in the end of every worker's run.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from xdist.scheduler import LoadScopeScheduling

SIMULATED_CLUSTER = "kube_cluster"
SLINKY = "slinky"


def _folders(nodeid: str) -> tuple[str, ...]:
    return PurePosixPath(nodeid.split("::", 1)[0]).parts[:-1]


def scope(nodeid: str) -> str:
    """The unit of work ``nodeid`` belongs to: its file, or the simulated cluster's group."""
    folders = _folders(nodeid)
    if SIMULATED_CLUSTER in folders or SLINKY in folders:
        return f"the simulated cluster ({SIMULATED_CLUSTER} and {SLINKY} folders)"
    return nodeid.split("::", 1)[0]


def rank(nodeid: str) -> int:
    """Where ``nodeid`` goes in the queue: lower first (the Slinky tests after the rest of their group)."""
    folders = _folders(nodeid)
    if SIMULATED_CLUSTER in folders:
        return 0
    if SLINKY in folders:
        return 1
    if "e2e" in folders:
        return 2
    if "integration" in folders:
        return 3
    return 4


class ByFileAndService(LoadScopeScheduling):
    """``--dist loadscope`` with :func:`scope` as the scope."""

    def _split_scope(self, nodeid: str) -> str:
        return scope(nodeid)
