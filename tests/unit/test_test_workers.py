"""The suite's own worker slots (tests/support/workers.py): no two slots share a port or a state
directory, slot 0 is a developer's plain run, and a developer's own values are the base."""

from __future__ import annotations

import itertools

from tests.support import schedule, workers

SPANS = {
    "TG_SLURM_CTLD_PORT": (0, 100, 200),  # the cluster, and the doctor tests' two extra clusters
    "TG_SLURM_NODE_PORT_BASE": tuple(range(5)) + tuple(range(100, 105)) + tuple(range(200, 205)),
    "TG_SIM_PORT_BASE": tuple(range(33)),  # kwok and the controllers at +0 .. +25, its apiserver +30 .. +32
}


def _ports(env: dict[str, str]) -> set[int]:
    return {int(env[name]) + offset for name in workers.PORTS for offset in SPANS.get(name, (0,))}


def test_ten_slots_never_share_a_port_or_a_directory() -> None:
    envs = []
    for n in range(10):
        env: dict[str, str] = {}
        workers.assign(env, n)
        envs.append({**{k: str(v) for k, v in workers.PORTS.items()}, **env})
    for a, b in itertools.combinations(envs, 2):
        assert not _ports(a) & _ports(b)
        assert {a.get("TG_SLURM_DIR"), a.get("TG_PG_DIR")} != {b.get("TG_SLURM_DIR"), b.get("TG_PG_DIR")}
    assert max(max(_ports(e)) for e in envs) < 32768  # below Linux's ephemeral ports (free_port())


def test_slot_zero_changes_nothing_and_a_developers_values_are_the_base() -> None:
    plain = {"PYTEST_XDIST_WORKER": "gw0"}
    assert workers.assign(plain) == 0 and plain == {"PYTEST_XDIST_WORKER": "gw0"}

    mine = {"PYTEST_XDIST_WORKER": "gw2", "TG_SLURM_DIR": "/tmp/my-slurm", "TG_PG_PORT": "25432"}
    assert workers.assign(mine) == 2
    assert mine["TG_SLURM_DIR"] == "/tmp/my-slurm-s2" and mine["TG_PG_PORT"] == "27432"

    beside = {"TG_TEST_SLOT": "5", "PYTEST_XDIST_WORKER": "gw1", "TG_SLURM_ROOT": "/var/cache/root"}
    assert workers.assign(beside) == 6
    assert beside["TG_SLURM_DIR"].endswith("/.local/slurm-root-s6")
    assert beside["TG_SLURM_CTLD_PORT"] == "22817"


def test_the_simulated_cluster_is_one_group_that_goes_first() -> None:
    ids = ["tests/unit/test_cli.py::test_a", "tests/e2e/kube_cluster/test_x.py::test_b",
           "tests/integration/kube_cluster/test_y.py::test_c", "tests/e2e/test_z.py::test_d",
           "tests/integration/test_w.py::test_e"]
    assert schedule.scope(ids[1]) == schedule.scope(ids[2]) != schedule.scope(ids[3])
    assert schedule.scope(ids[0]) == "tests/unit/test_cli.py"
    assert sorted(ids, key=schedule.rank) == [ids[1], ids[2], ids[3], ids[4], ids[0]]


def test_the_slinky_tests_join_the_simulated_clusters_group_and_come_last_in_it() -> None:
    """One slurm-operator cluster per machine (port 6820), on the simulated cluster's worker, after the
    tests that must not meet its NodeSet pods and its drains."""
    ids = ["tests/integration/slinky/test_s.py::test_a", "tests/e2e/test_z.py::test_b",
           "tests/e2e/slinky/test_t.py::test_c", "tests/integration/kube_cluster/test_y.py::test_d",
           "tests/e2e/kube_cluster/test_x.py::test_e"]
    assert {schedule.scope(i) for i in (ids[0], ids[2], ids[3], ids[4])} == {schedule.scope(ids[3])}
    assert schedule.scope(ids[1]) == "tests/e2e/test_z.py"
    assert sorted(ids, key=schedule.rank) == [ids[3], ids[4], ids[0], ids[2], ids[1]]
