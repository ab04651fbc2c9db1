"""Engine metrics (``observe.metrics``): a crash driven through the real engine moves the counters
and histograms that ``/metrics`` serves, with the labels a dashboard filters on.

The engine runs as in every engine test (``scenario``): real SQLite store, real catalog and
matcher, ``ManualClock``, the in-memory ``FakeScheduler``. The values are read from the engine's
registry, which is the one the shells serve.
"""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.unit.engine import scenario
from tests.unit.engine.test_engine_recover import killed_after_requeue_hold
from trainguard import engine as engine_mod
from trainguard import health as health_mod
from trainguard.observe import metrics as metrics_mod
from trainguard.store import audit


def value(engine: engine_mod.Engine, name: str, **labels: str) -> float:
    found = engine.metrics.registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


async def test_a_hardware_crash_in_action_mode_moves_every_metric_of_its_trail(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    e = h.engine
    h.submit("20")
    h.write("20", *scenario.ranked(0, "iteration 1 loss 2.3"))
    await h.step()
    assert value(e, "trainguard_workloads", state="RUNNING") == 1
    h.clock.advance(2.0)
    h.write("20", *scenario.ranked(1, scenario.XID_79))

    await h.step()
    await h.settle()

    assert value(e, "trainguard_anomalies_total", category="gpu_fallen_off_bus", attribution="hardware") == 1
    assert value(e, "trainguard_advice_total", action="requeue", mode="Action", decided_by="policy-engine") == 1
    for operation in ("requeue_hold", "exclude_nodes", "release"):
        assert value(e, "trainguard_actions_total", operation=operation, status="intent", mode="Action") == 1
        assert value(e, "trainguard_actions_total", operation=operation, status="done", mode="Action") == 1
    assert value(e, "trainguard_outcomes_total", disposition="Converged", decided_by="policy-engine",
                 mode="Action") == 1
    assert value(e, "trainguard_detection_latency_seconds_count", symptom="crash") == 1
    # Read at the step after the settle window opened, recorded once it passed (ManualClock).
    detected = value(e, "trainguard_detection_latency_seconds_sum", symptom="crash")
    assert scenario.SETTLE_S <= detected <= scenario.SETTLE_S + 1.0
    assert value(e, "trainguard_decision_latency_seconds_count") == 1
    assert value(e, "trainguard_recovery_duration_seconds_count", disposition="Converged") == 1
    assert value(e, "trainguard_audit_write_seconds_count", kind="anomaly") == 1
    assert value(e, "trainguard_audit_write_seconds_count", kind="action") == 6
    assert value(e, "trainguard_watchdog_fallbacks_total", released_hold="true") == 0
    # The requeued job waits for its next attempt; the gauge follows the scheduler's state.
    await h.step()
    assert value(e, "trainguard_workloads", state="PENDING") == 1
    assert value(e, "trainguard_workloads", state="RUNNING") == 0


async def test_monitor_mode_counts_skipped_steps_and_the_monitored_outcome(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    e = h.engine
    h.submit("10", "trainguard")  # the default policy, Monitor
    h.write("10", *scenario.ranked(0, "iteration 1 loss 2.3"), *scenario.ranked(1, scenario.XID_79))

    await h.step()
    await h.settle()

    assert value(e, "trainguard_advice_total", action="requeue", mode="Monitor", decided_by="policy-engine") == 1
    assert value(e, "trainguard_actions_total", operation="requeue_hold", status="skipped", mode="Monitor") == 1
    assert value(e, "trainguard_actions_total", operation="requeue_hold", status="done", mode="Monitor") == 0
    assert value(e, "trainguard_outcomes_total", disposition="Monitored", decided_by="policy-engine",
                 mode="Monitor") == 1


async def test_an_application_crash_is_counted_under_its_own_category_and_attribution(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    h.submit("22")
    h.write("22", *scenario.ranked(0, "iteration 1 loss 2.3"), *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    h.fail("22")

    await h.step()
    await h.recoveries()

    assert value(h.engine, "trainguard_anomalies_total", category="python_exception", attribution="application") == 1
    assert value(h.engine, "trainguard_anomalies_total", category="gpu_fallen_off_bus", attribution="hardware") == 0


async def test_a_watchdog_release_after_a_restart_is_a_fallback(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    await killed_after_requeue_hold(h, "60")

    h.clock.advance(301)  # past the advice's watchdog deadline
    restarted = h.new_engine()
    await restarted.recover()

    assert value(restarted, "trainguard_watchdog_fallbacks_total", released_hold="true") == 1
    # The restarted process never saw the advice: its mode is not guessed.
    assert value(restarted, "trainguard_outcomes_total", disposition="Abandoned", decided_by="watchdog",
                 mode="unknown") == 1


async def test_engines_with_their_own_health_count_apart_and_one_health_shares_its_metrics(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    other = h.new_engine()  # its own health model, so its own registry
    assert other.metrics is not h.engine.metrics
    shared = health_mod.Health()
    first = engine_mod.Engine(h.scheduler, h.store, h.engine.policies, h.engine.catalog, clock_=h.clock,
                              settings=h.engine.settings, health=shared)
    second = engine_mod.Engine(h.scheduler, h.store, h.engine.policies, h.engine.catalog, clock_=h.clock,
                               settings=h.engine.settings, health=shared)  # a new leadership term
    assert first.metrics is second.metrics
    assert h.store.observers.count(first.metrics) == 1
    h.submit("30")
    await second.discover()
    assert second.metrics.registry.get_sample_value("trainguard_workloads", {"state": "RUNNING"}) == 1


async def test_a_stopped_engine_counts_no_workloads_and_the_next_term_counts_its_own(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    h.submit("50")
    await h.engine.discover()
    assert value(h.engine, "trainguard_workloads", state="RUNNING") == 1
    stop = asyncio.Event()
    run = asyncio.ensure_future(h.engine.run(stop))
    await h.engine.discover()
    stop.set()
    await run

    assert value(h.engine, "trainguard_workloads", state="RUNNING") == 0  # e.g. a replica that lost the Lease
    nxt = engine_mod.Engine(h.scheduler, h.store, h.engine.policies, h.engine.catalog, clock_=h.clock,
                            settings=h.engine.settings, health=h.engine.health)
    await nxt.discover()
    assert value(nxt, "trainguard_workloads", state="RUNNING") == 1


def test_the_metrics_of_a_registry_live_as_long_as_it_does() -> None:
    registry = CollectorRegistry()
    metrics_mod.EngineMetrics.shared(registry).watchdog.labels("true").inc()
    gc.collect()  # nothing but the registry refers to them now (e.g. the engine and store of a past term are gone)
    again = metrics_mod.EngineMetrics.shared(registry)  # no duplicate registration
    assert again.registry.get_sample_value("trainguard_watchdog_fallbacks_total", {"released_hold": "true"}) == 1


def test_metrics_of_a_dropped_registry_are_freed() -> None:
    registry = CollectorRegistry()
    first = metrics_mod.EngineMetrics.shared(registry)
    assert metrics_mod.EngineMetrics.shared(registry) is first
    watcher = weakref.ref(first)
    del first, registry
    gc.collect()
    assert watcher() is None  # no module-level reference keeps a test's engine metrics alive


def written(kind: str, payload: dict[str, object], *, at: float = 10.0, decided_by: str = "policy-engine",
            workload: str = "w", attempt: int = 0) -> audit.Written:
    return audit.Written(kind=kind, workload=workload, attempt=attempt, payload=payload, decided_by=decided_by,
                         at=at, write_s=0.002)


def test_label_values_outside_their_vocabulary_become_other() -> None:
    m = metrics_mod.EngineMetrics(CollectorRegistry())
    m.audit_written(written("verdict", {"category": "slurm/job/12345", "attribution": "node42"}))
    m.audit_written(written("action", {"operation": "node17", "status": "weird", "generation": 1}))

    assert m.registry.get_sample_value("trainguard_anomalies_total", {"category": "other", "attribution": "other"}) == 1
    assert m.registry.get_sample_value("trainguard_actions_total",
                                       {"operation": "other", "status": "other", "mode": "unknown"}) == 1
    text = generate_latest(m.registry).decode()
    assert "12345" not in text and "node42" not in text and "node17" not in text


def test_decision_latency_is_anomaly_to_advice_of_the_same_attempt() -> None:
    m = metrics_mod.EngineMetrics(CollectorRegistry())
    m.audit_written(written("anomaly", {"symptom": "crash", "first_seen_at": 7.0}, at=10.0))
    m.audit_written(written("advice", {"action": "requeue", "mode": "Action", "generation": 1}, at=10.25,
                            attempt=1))  # another attempt: not its decision
    m.audit_written(written("advice", {"action": "requeue", "mode": "Action", "generation": 1}, at=10.5))

    assert m.registry.get_sample_value("trainguard_decision_latency_seconds_count", {}) == 1
    assert m.registry.get_sample_value("trainguard_decision_latency_seconds_sum", {}) == pytest.approx(0.5)
    assert m.registry.get_sample_value("trainguard_detection_latency_seconds_sum", {"symptom": "crash"}) == 3.0


async def test_a_failing_observer_never_fails_the_write(make_harness: scenario.MakeHarness) -> None:
    class Broken:
        def audit_written(self, record: audit.Written) -> None:
            raise RuntimeError("observer bug")

    h = await make_harness()
    h.store.observers.insert(0, Broken())
    h.submit("40", "trainguard")
    h.write("40", *scenario.ranked(1, scenario.XID_79))

    await h.step()
    await h.settle()

    assert await h.kinds("40") == ["anomaly", "verdict", "advice", "action", "action", "action", "outcome"]
    assert value(h.engine, "trainguard_advice_total", action="requeue", mode="Monitor", decided_by="policy-engine") == 1
