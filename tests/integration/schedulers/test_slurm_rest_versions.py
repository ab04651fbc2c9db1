"""slurmrestd specifics: version detection, Unsupported without a fallback, the fallback logged."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

import pytest

from tests.support import slurm
from trainguard.schedulers import base, factory, slurm_rest, tokens

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.timeout(120)]


def rest(cluster: slurm.SlurmCluster, **kw: object) -> slurm_rest.SlurmRest:
    url = urlsplit(cluster.rest_url)
    s = factory.open_scheduler(f"slurm-rest://{url.hostname}:{url.port}", jwt=cluster.jwt, **kw)  # type: ignore[arg-type]
    assert isinstance(s, slurm_rest.SlurmRest)
    return s


async def test_detects_the_servers_api_version(slurm_cluster: slurm.SlurmCluster) -> None:
    s = rest(slurm_cluster)
    try:
        assert await s.api_version() == slurm_cluster.spoken_api_version
    finally:
        await s.close()


async def test_requeue_without_fallback_is_unsupported(slurm_cluster: slurm.SlurmCluster) -> None:
    s = rest(slurm_cluster)
    try:
        with pytest.raises(base.Unsupported, match=slurm_cluster.spoken_api_version):
            await s.requeue("1")
    finally:
        await s.close()


async def test_fallback_is_logged_with_its_transport(slurm_cluster: slurm.SlurmCluster,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    local = factory.open_scheduler("slurm-local", env=slurm_cluster.client_env)
    s = rest(slurm_cluster, fallback=local)
    job_id = slurm_cluster.submit("#!/bin/bash\nsleep 600\n", "--comment=trainguard", "--begin=now+3600")
    try:
        with caplog.at_level(logging.INFO, logger="trainguard.schedulers.slurm_rest"):
            await s.requeue(job_id)  # pending: "already done" through the CLI
        assert any("performed by slurm-local" in r.getMessage() for r in caplog.records)
    finally:
        slurm_cluster.cancel(job_id)
        await s.close()


async def test_bad_token_is_a_clear_error(slurm_cluster: slurm.SlurmCluster) -> None:
    url = urlsplit(slurm_cluster.rest_url)
    s = factory.open_scheduler(f"slurm-rest://{url.hostname}:{url.port}", jwt="not-a-token")
    try:
        with pytest.raises(base.SchedulerError, match=r"HTTP (401|403|500|511).*(token|JWT)"):
            await s.list_jobs()
    finally:
        await s.close()


async def test_a_rotated_token_file_is_used_without_a_restart(slurm_cluster: slurm.SlurmCluster, tmp_path) -> None:
    """Slurm JWTs expire; a Secret renewed under us must not leave us refused until someone restarts us."""
    url = urlsplit(slurm_cluster.rest_url)
    secret = tmp_path / "jwt"
    secret.write_text("expired-token\n")
    s = factory.open_scheduler(f"slurm-rest://{url.hostname}:{url.port}", jwt=tokens.TokenFile(secret))
    try:
        with pytest.raises(base.SchedulerError, match=r"HTTP (401|403|500|511)"):
            await s.list_jobs()
        # a Kubernetes Secret update: a new file swapped in by rename
        fresh = tmp_path / "jwt.new"
        fresh.write_text(slurm_cluster.jwt + "\n")
        fresh.replace(secret)
        assert isinstance(await s.list_jobs(), list)
        secret.unlink()  # mid-rotation the file is briefly absent: the last token is kept
        assert isinstance(await s.list_jobs(), list)
    finally:
        await s.close()


def test_a_missing_or_empty_token_file_is_refused_at_start(tmp_path) -> None:
    with pytest.raises(ValueError, match="cannot read the slurm JWT file"):
        tokens.TokenFile(tmp_path / "absent")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        tokens.TokenFile(tmp_path / "empty")
