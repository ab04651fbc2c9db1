"""A scheduler command whose caller is cancelled (the replica lost its leadership) is killed, not left
running to change the job behind the new leader's back."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from trainguard.schedulers import runner

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

SLOW = """#!/bin/sh
echo $$ > {pidfile}
exec sleep 300
"""


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def test_cancelling_a_call_kills_its_process(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    script = tmp_path / "scontrol"
    script.write_text(SLOW.format(pidfile=pidfile))
    script.chmod(0o755)
    local = runner.LocalRunner(binaries=("scontrol",), path=str(tmp_path))

    call = asyncio.ensure_future(local.run(["scontrol", "requeuehold", "7"]))
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline and not call.done(), "the command never started"
        await asyncio.sleep(0.05)
    pid = int(pidfile.read_text())
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call

    deadline = time.monotonic() + 20
    while _running(pid):
        assert time.monotonic() < deadline, f"process {pid} still runs after its caller was cancelled"
        await asyncio.sleep(0.05)
