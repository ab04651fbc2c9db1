"""``open_scheduler`` spec parsing, and the quoting of SSH command lines."""

from __future__ import annotations

import shlex

import pytest

from trainguard.schedulers import base, factory, slurm_rest, slurm_ssh


@pytest.mark.parametrize("spec", ["slurm", "pbs://x", "slurm-ssh://", "slurm-ssh://us;er@h", "slurm-rest://h:99999",
                                  "slurm-ssh://u@h:0", "slurm-rest://h/x"])
def test_bad_specs_are_clear_errors(spec: str) -> None:
    with pytest.raises(ValueError, match=r"scheduler|port"):
        factory.open_scheduler(spec, jwt="t")


async def test_ssh_spec() -> None:
    s = factory.open_scheduler("slurm-ssh://alice@login1:2222")
    assert s.name == "slurm-ssh://login1"
    await s.close()


async def test_rest_spec_needs_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JWT", raising=False)
    with pytest.raises(ValueError, match="JWT"):
        factory.open_scheduler("slurm-rest://127.0.0.1:6820")
    s = factory.open_scheduler("slurm-rest://127.0.0.1:6820", jwt="abc", https=True)
    assert isinstance(s, slurm_rest.SlurmRest) and s.name == "slurm-rest://127.0.0.1:6820"
    await s.close()


def test_ssh_command_line_quotes_every_word() -> None:
    r = slurm_ssh.SshRunner("h", remote_env={"SLURM_CONF": "/etc/my slurm/slurm.conf"})
    line = r.command_line(["scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=trainguard: a'b $(id) `x`"])
    assert shlex.split(line) == ["env", "SLURM_CONF=/etc/my slurm/slurm.conf", "scontrol", "update", "NodeName=node1",
                                 "State=DRAIN", "Reason=trainguard: a'b $(id) `x`"]
    with pytest.raises(base.SchedulerError, match="may execute"):
        r.command_line(["bash", "-c", "id"])
    with pytest.raises(base.SchedulerError, match="environment variable"):
        slurm_ssh.SshRunner("h", remote_env={"A;B": "x"})
