"""Engine: which jobs it tracks, and what it records when a job's opt-in cannot be honoured."""

from __future__ import annotations

from tests.unit.engine import scenario
from trainguard.model import vocab


async def test_only_jobs_whose_comment_opts_in_are_tracked(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("1", "trainguard")
    h.submit("2", "trainguard policy=act")
    h.submit("3", "")
    h.submit("4", "trainguardx policy=act")
    h.submit("5", "please no trainguard")
    for job_id in ("1", "2", "3", "4", "5"):
        h.write(job_id, *scenario.ranked(1, scenario.XID_79))

    await h.step()
    await h.settle()

    assert sorted(h.engine.runtimes) == [scenario.workload_of("1"), scenario.workload_of("2")]
    for job_id in ("3", "4", "5"):
        assert await h.store.get_workload(scenario.workload_of(job_id)) is None
        assert await h.records(job_id) == []
        assert h.mutations(job_id) == []
    # the opted-in ones were followed: the Xid line became an anomaly for each
    for job_id in ("1", "2"):
        assert len(await h.records(job_id, vocab.AuditKind.ANOMALY)) == 1
    record = await h.store.get_workload(scenario.workload_of("2"))
    assert record is not None
    assert (record.policy, record.job_id, record.opt_in_errors) == ("act", "2", [])


async def test_a_job_selecting_an_unknown_policy_is_recorded_with_the_reason_and_never_acted_on(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    h.submit("7", "trainguard policy=nosuch")
    h.write("7", *scenario.ranked(1, scenario.XID_79))

    await h.step()
    await h.settle()
    h.fail("7")
    await h.step()
    await h.settle()

    record = await h.store.get_workload(scenario.workload_of("7"))
    assert record is not None
    assert record.policy == "nosuch"
    assert len(record.opt_in_errors) == 1
    assert "no RecoveryPolicy named 'nosuch'" in record.opt_in_errors[0]
    assert h.runtime("7").spec is None
    assert await h.records("7") == []  # no anomaly, verdict or advice: nothing covers it
    assert h.scheduler.mutating_calls() == []


async def test_bad_override_keys_are_recorded_and_the_good_ones_still_apply(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    h.submit("8", "trainguard policy=act frobnicate=1 max-retries=lots hang-timeout=90s")

    await h.step()

    record = await h.store.get_workload(scenario.workload_of("8"))
    assert record is not None
    errors = record.opt_in_errors
    assert len(errors) == 2
    assert any("unknown key 'frobnicate'" in e for e in errors)
    assert any(e.startswith("max-retries='lots'") for e in errors)
    spec = h.runtime("8").spec
    assert spec is not None
    assert spec.detection.hang_timeout == 90.0
    assert spec.retries.max_retries == 3  # the policy's value: the bad override was not applied
    assert spec.mode is vocab.Mode.ACTION
