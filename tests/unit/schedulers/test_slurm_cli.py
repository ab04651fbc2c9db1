"""Parsing of real Slurm output captured on the local cluster: 22.05 (Debian 12) and 24.11 (Debian 13,
``hack/slurm-root.sh``): ``scontrol``, ``squeue --json`` and slurmrestd v0.0.40-v0.0.42.

The 24.11 files hold the same jobs as the 22.05 ones, plus job 7, requeued held by ``scontrol
requeuehold`` (Restarts=1); node4 is drained with our reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.model import workloads
from trainguard.schedulers import base, slurm_cli, slurm_commands

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("node[1-3,5],gpu-a[01-02]", ["node1", "node2", "node3", "node5", "gpu-a01", "gpu-a02"]),
        ("node4", ["node4"]),
        ("r[1-2]n[08-09]", ["r1n08", "r1n09", "r2n08", "r2n09"]),
        ("a,b[7],c", ["a", "b7", "c"]),
        ("(null)", []),
        ("", []),
    ],
)
def test_expand_hostlist(expr: str, names: list[str]) -> None:
    assert slurm_cli.expand_hostlist(expr) == names


@pytest.mark.parametrize("expr", ["node[1-", "node]1[", "node[3-1]", "node[a-b]"])
def test_expand_hostlist_rejects_garbage(expr: str) -> None:
    with pytest.raises(ValueError, match="hostlist"):
        slurm_cli.expand_hostlist(expr)


def test_scontrol_job_lines() -> None:
    lines = (DATA / "scontrol-show-job-22.05.txt").read_text().splitlines()
    jobs = {j.job_id: j for j in (slurm_cli.job_from_scontrol(slurm_cli.parse_kv_line(x), "c") for x in lines)}
    assert set(jobs) == {"1", "2_1", "3", "4", "5", "2_2"}
    train = jobs["1"]
    assert train.comment == "trainguard policy=fast max-retries=3"
    assert train.nodes == ["node1", "node2"]
    assert train.state is workloads.JobState.FAILED
    assert (train.exit_code, train.exit_signal) == (141, 0)
    assert train.stdout_path == "/tmp/tg-h6/slurm/jobs/train-1.out"
    assert train.workload == "slurm/c/1"
    task = jobs["2_1"]
    assert (task.array_job_id, task.array_task_id) == ("2", "1")
    assert task.stdout_path == "/tmp/tg-h6/slurm/jobs/arr-2_1.out"
    held = jobs["5"]
    assert held.held and held.excluded_nodes == ["node4"] and held.state is workloads.JobState.PENDING
    assert held.started_at is None and held.ended_at is None
    assert not jobs["3"].held and jobs["3"].ended_at is None and jobs["3"].requeue_allowed


def test_squeue_json_matches_scontrol() -> None:
    """The two 22.05 sources must give the same snapshot for the fields we act on."""
    data = json.loads((DATA / "squeue-22.05.json").read_text())
    from_json = {s.job_id: s for r in data["jobs"] if (s := slurm_cli.job_from_json(r))}
    lines = (DATA / "scontrol-show-job-22.05.txt").read_text().splitlines()
    from_text = {
        s.job_id: s for s in (slurm_cli.job_from_scontrol(slurm_cli.parse_kv_line(x), "trainguard") for x in lines)
    }
    assert set(from_json) == set(from_text)
    fields = ("workload", "state", "reason", "exit_code", "exit_signal", "attempt", "nodes", "excluded_nodes",
              "comment", "held", "array_job_id", "array_task_id", "stdout_path", "partition", "account", "user", "qos")
    for job_id, snap in from_json.items():
        for name in fields:
            assert getattr(snap, name) == getattr(from_text[job_id], name), (job_id, name)


JSON_24_11 = ["squeue-24.11.json", "scontrol-show-job-24.11.json", "slurmrestd-v0.0.40-jobs.json",
              "slurmrestd-v0.0.41-jobs.json", "slurmrestd-v0.0.42-jobs.json"]
SNAPSHOT_FIELDS = ("workload", "state", "reason", "exit_code", "exit_signal", "attempt", "nodes", "excluded_nodes",
                   "comment", "held", "array_job_id", "array_task_id", "stdout_path", "stderr_path", "partition",
                   "requeue_allowed", "started_at", "ended_at")


@pytest.mark.parametrize("source", JSON_24_11)
def test_24_11_json_matches_scontrol_text(source: str) -> None:
    """Every 24.11 JSON source gives the snapshot ``scontrol -o show job`` gives, field by field."""
    data = json.loads((DATA / source).read_text())
    from_json = {s.job_id: s for r in data["jobs"] if (s := slurm_cli.job_from_json(r))}
    lines = (DATA / "scontrol-show-job-24.11.txt").read_text().splitlines()
    from_text = {
        s.job_id: s for s in (slurm_cli.job_from_scontrol(slurm_cli.parse_kv_line(x), "trainguard") for x in lines)
    }
    assert set(from_json) == set(from_text) == {"1", "2_1", "2_2", "3", "4", "5", "7"}
    for job_id, snap in from_json.items():
        for name in SNAPSHOT_FIELDS:
            assert getattr(snap, name) == getattr(from_text[job_id], name), (job_id, name)


def test_24_11_jobs() -> None:
    data = json.loads((DATA / "scontrol-show-job-24.11.json").read_text())
    jobs = {s.job_id: s for r in data["jobs"] if (s := slurm_cli.job_from_json(r))}
    train = jobs["1"]
    assert (train.state, train.exit_code, train.nodes) == (workloads.JobState.FAILED, 141, ["node1", "node2"])
    assert train.comment == "trainguard policy=fast max-retries=3" and train.stdout_path
    assert train.stdout_path.endswith("/train-1.out")
    assert (jobs["2_2"].array_job_id, jobs["2_2"].array_task_id, jobs["2_2"].state) == (
        "2", "2", workloads.JobState.RUNNING)
    assert jobs["5"].held and jobs["5"].excluded_nodes == ["node4"] and jobs["5"].reason == "JobHeldUser"
    requeued = jobs["7"]
    assert (requeued.state, requeued.held, requeued.attempt) == (workloads.JobState.PENDING, True, 1)
    # ours (scontrol requeuehold), told apart from a person's hold (job 5) as scontrol shows it
    assert requeued.reason == "job_requeued_in_held_state"


def test_24_11_requeue_held_job_still_completing_is_completing_as_scontrol_says() -> None:
    """Captured right after ``scontrol requeuehold`` of a job whose tasks take long to die."""
    (rec,) = json.loads((DATA / "scontrol-show-job-24.11-completing.json").read_text())["jobs"]
    assert rec["job_state"] == ["PENDING", "COMPLETING"]
    from_json = slurm_cli.job_from_json(rec, "trainguard")
    line = (DATA / "scontrol-show-job-24.11-completing.txt").read_text().strip()
    from_text = slurm_cli.job_from_scontrol(slurm_cli.parse_kv_line(line), "trainguard")
    assert from_json is not None and from_json.state is workloads.JobState.COMPLETING
    for name in SNAPSHOT_FIELDS:
        assert getattr(from_json, name) == getattr(from_text, name), name


def test_24_11_nodes_from_scontrol_and_slurmrestd_agree() -> None:
    lines = (DATA / "scontrol-show-node-24.11.txt").read_text().splitlines()
    text = {n.name: n for n in (slurm_cli.node_from_scontrol(slurm_cli.parse_kv_line(x)) for x in lines)}
    rest = {n.name: n for n in map(slurm_cli.node_from_json,
                                   json.loads((DATA / "slurmrestd-v0.0.42-nodes.json").read_text())["nodes"])}
    assert text == rest
    assert sorted(text) == ["node1", "node2", "node3", "node4"]
    assert text["node4"].drained and text["node4"].reason == "trainguard: xid 79 on GPU 3"
    assert not text["node1"].drained and text["node1"].partitions == ["debug"]


def test_opt_in_is_first_token_exactly() -> None:
    assert slurm_cli.opted_in("trainguard")
    assert slurm_cli.opted_in("trainguard policy=x")
    assert not slurm_cli.opted_in("trainguardx")
    assert not slurm_cli.opted_in("other trainguard")
    assert not slurm_cli.opted_in("")


def test_v0042_json_shapes() -> None:
    """24.11 (data_parser v0.0.42) wraps numbers and lists job_state; same snapshot semantics."""
    def num(n: int) -> dict[str, object]:
        return {"set": True, "infinite": False, "number": n}

    rec = {
        "job_id": 57, "array_job_id": num(50), "array_task_id": num(7), "name": "train", "user_name": "alice",
        "job_state": ["PENDING", "REQUEUED"], "state_reason": "JobHeldAdmin", "priority": num(0),
        "exit_code": {"status": ["SIGNALED"], "return_code": num(0), "signal": {"id": num(9), "name": "KILL"}},
        "restart_cnt": 2, "nodes": "", "excluded_nodes": "gpu[01-02]", "comment": "trainguard",
        "standard_output": "/out/%x-%A_%a.log", "standard_error": "", "batch_host": "",
        "submit_time": num(1_700_000_000), "start_time": num(0), "end_time": num(0), "requeue": True,
        "cluster": "big", "account": "ml", "qos": "high", "partition": "gpu",
    }
    snap = slurm_cli.job_from_json(rec)
    assert snap is not None
    assert snap.job_id == "50_7" and snap.workload == "slurm/big/50_7"
    assert snap.state is workloads.JobState.PENDING and snap.held and snap.attempt == 2
    assert (snap.exit_code, snap.exit_signal) == (0, 9)
    assert snap.excluded_nodes == ["gpu01", "gpu02"]
    assert snap.stdout_path == snap.stderr_path == "/out/train-50_7.log"
    assert (snap.user, snap.account, snap.qos, snap.partition) == ("alice", "ml", "high", "gpu")


SCONTROL_ACCOUNT_LINE = (
    "JobId=3 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901757 Nice=0 Account=ml-team "
    "QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 "
    "ExitCode=0:0 RunTime=00:00:00 TimeLimit=365-00:00:00 TimeMin=N/A SubmitTime=2026-12-01T13:30:55 "
    "Partition=debug NodeList=node1 BatchHost=node1 NumNodes=1 NumCPUs=1 NumTasks=1 Comment=trainguard policy=x  "
    "StdErr=/work/x/slurm-3.out StdIn=/dev/null StdOut=/work/x/slurm-3.out Power= "
)
"""A 22.05 ``scontrol -o show job`` line of a job submitted with ``--account=ml-team`` (captured on the
local cluster, which has no accounting database: QOS stays ``(null)``), shortened."""


def test_routing_attributes_from_scontrol() -> None:
    snap = slurm_cli.job_from_scontrol(slurm_cli.parse_kv_line(SCONTROL_ACCOUNT_LINE), "c")
    assert (snap.partition, snap.account, snap.user, snap.qos) == ("debug", "ml-team", "root", "")
    assert snap.comment == "trainguard policy=x"
    other = SCONTROL_ACCOUNT_LINE.replace("UserId=root(0)", "UserId=alice(1000)").replace("QOS=(null)", "QOS=high")
    snap = slurm_cli.job_from_scontrol(slurm_cli.parse_kv_line(other), "c")
    assert (snap.user, snap.qos) == ("alice", "high")
    bare = slurm_cli.job_from_scontrol(slurm_cli.parse_kv_line("JobId=4 JobState=PENDING Account=(null)"), "c")
    assert (bare.account, bare.user, bare.qos) == ("", "", "")


def test_routing_attributes_from_json_of_every_version() -> None:
    """v0.0.38 (22.05) to v0.0.42 (24.11) print account, user_name and qos as plain strings."""
    data = json.loads((DATA / "squeue-22.05.json").read_text())
    snaps = [s for r in data["jobs"] if (s := slurm_cli.job_from_json(r))]
    assert {(s.user, s.account, s.qos) for s in snaps} == {("root", "", "")}
    odd = slurm_cli.job_from_json({"job_id": 5, "job_state": "RUNNING", "account": None, "qos": {"x": 1}})
    assert odd is not None and (odd.account, odd.user, odd.qos) == ("", "", "")


def test_unsplit_pending_array_record_is_skipped() -> None:
    rec = {"job_id": 9, "array_job_id": 9, "array_task_id": None, "array_task_string": "4-10", "job_state": "PENDING"}
    assert slurm_cli.job_from_json(rec) is None


def test_nodes_and_our_reason() -> None:
    lines = (DATA / "scontrol-show-node-22.05.txt").read_text().splitlines()
    nodes = {n.name: n for n in (slurm_cli.node_from_scontrol(slurm_cli.parse_kv_line(x)) for x in lines)}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert nodes["node4"].drained and nodes["node4"].reason == "trainguard: xid 79 on GPU 3"
    assert not nodes["node1"].drained and nodes["node1"].partitions == ["debug"]
    assert slurm_commands.our_reason("xid 79\non gpu") == "trainguard: xid 79 on gpu"
    assert slurm_commands.our_reason("trainguard: x") == "trainguard: x"


@pytest.mark.parametrize("bad", ["1;rm -rf /", "12 13", "$(id)", "", "1_", "abc", "1_2_3"])
def test_job_ids_are_validated_before_any_command(bad: str) -> None:
    with pytest.raises(base.SchedulerError, match="not a Slurm job id"):
        slurm_commands.argv_job_op("requeue", bad)


@pytest.mark.parametrize("bad", ["node1;reboot", "-rf", "a b", "", "x" * 70])
def test_node_names_are_validated(bad: str) -> None:
    with pytest.raises(base.SchedulerError, match="not a Slurm node name"):
        slurm_commands.argv_exclude("12", ["node1", bad])


def test_argv_lists() -> None:
    # finished jobs must be listed on 24.11 too, whose squeue --json shows only active ones by default
    assert slurm_commands.argv_list_jobs() == ["squeue", "--json", "--states=all"]
    assert slurm_commands.argv_job_op("requeuehold", "12_3") == ["scontrol", "requeuehold", "12_3"]
    assert slurm_commands.argv_exclude("7", ["node1", "node2"]) == [
        "scontrol", "update", "JobId=7", "ExcNodeList=node1,node2"]
    assert slurm_commands.argv_node_state("node2", "DRAIN", "bad gpu") == [
        "scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=trainguard: bad gpu"]


def test_output_path_expansion() -> None:
    got = slurm_cli.expand_output_path("/o/%x_%j_%A_%a_%u_%N_%%_%4j.log", job_id="42", name="n", user="u",
                                       array_job="40", array_task="2", first_node="node1")
    assert got == "/o/n_42_40_2_u_node1_%_0042.log"
