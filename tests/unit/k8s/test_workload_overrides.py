"""WorkloadRecovery ``spec.overrides`` -> the engine's per-workload overrides (k8s/recovery.py,
k8s/operator/recoveries.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from trainguard.k8s import operator, recovery
from trainguard.model import vocab


def test_every_override_field_reaches_the_engine_in_the_comment_keys() -> None:
    mode, values = recovery.engine_overrides({"mode": "Monitor", "maxRetries": 1, "maxAttemptsWithoutCheckpoint": 2,
                                              "hangTimeout": "90s", "maxExcludedNodesPerJob": 0})
    assert mode is vocab.Mode.MONITOR
    assert values == {"max-retries": 1, "max-attempts-without-checkpoint": 2, "hang-timeout": 90.0,
                      "max-excluded-nodes": 0}
    # every field of the schema is mapped: nothing the CRD accepts is dropped on the way
    assert set(recovery.Overrides.model_fields) == {"mode", *recovery.ENGINE_KEYS}
    assert recovery.engine_overrides({"mode": "Action"}) == (None, {})
    with pytest.raises(ValidationError):
        recovery.engine_overrides({"maxRetries": 101})


def body(annotations: dict[str, str] | None = None, cluster: str = "gpu", **overrides: Any) -> dict[str, Any]:
    return {"metadata": {"name": "x", "annotations": annotations or {}},
            "spec": {"workload": {"kind": "SlurmJob", "cluster": cluster, "id": "5"}, "overrides": overrides}}


def test_a_hand_made_workloadrecovery_applies_to_the_job_its_spec_names() -> None:
    shell = operator.Shell(operator.OperatorConfig(scheduler="slurm-local"))
    shell.recoveries.override_mode(body(mode="Monitor", maxRetries=1), deleted=False)
    assert shell.recoveries.overrides == {"slurm/gpu/5": vocab.Mode.MONITOR}
    assert shell.recoveries.policy_overrides == {"slurm/gpu/5": {"max-retries": 1}}
    shell.recoveries.override_mode(body(mode="Monitor", maxRetries=1), deleted=True)
    assert shell.recoveries.overrides == {} and shell.recoveries.policy_overrides == {}
    ours = body({"trainguard.dev/workload": "slurm/other/5"}, maxExcludedNodesPerJob=0)
    shell.recoveries.override_mode(ours, deleted=False)
    assert shell.recoveries.policy_overrides == {"slurm/other/5": {"max-excluded-nodes": 0}}
    shell.recoveries.override_mode(body(cluster="", maxRetries=0), deleted=False)  # no engine yet: job not tracked
    assert set(shell.recoveries.policy_overrides) == {"slurm/other/5"}
