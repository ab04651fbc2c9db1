"""Which shard a workload is in, and the shard spec's validation (``shards.py``)."""

from __future__ import annotations

import pytest

from trainguard import shards
from trainguard.model import workloads


def test_the_shard_of_a_workload_is_the_same_in_every_process() -> None:
    job = workloads.JobSnapshot(workload="slurm/gpu-a/7", job_id="7", state=workloads.JobState.RUNNING,
                                partition="big,small", namespace="team-x")
    assert [shards.key_value(job, key) for key in shards.KEYS] == ["gpu-a", "big", "team-x"]
    assert shards.shard_index("gpu-a", 8) == 6  # CRC-32: fixed across processes and machines
    assert shards.cluster_of("jobset/team-x/train") == "jobset"


def test_every_replica_must_be_named_and_keyed_by_a_known_key() -> None:
    with pytest.raises(ValueError, match="shard key"):
        shards.ShardSpec(2, "rack", "a")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="replica id"):
        shards.ShardSpec(2, "cluster", "")
    assert shards.ShardSpec(4, "partition", "a").lease(3) == "shards/partition/4/shard-3"
