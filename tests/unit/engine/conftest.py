"""Fixtures for the engine tests (see ``scenario`` for the Harness they build)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import fake_scheduler, journal_replay
from tests.unit.engine import scenario
from trainguard import engine as engine_mod
from trainguard import settings as settings_mod
from trainguard.detect import catalog as catalog_mod
from trainguard.detect import matcher as matcher_mod
from trainguard.model import clock
from trainguard.policy import loader
from trainguard.store import database


@pytest.fixture(scope="session")
def catalog() -> catalog_mod.Catalog:
    return catalog_mod.load_catalog()


@pytest.fixture(scope="session")
def compiled_matcher(catalog: catalog_mod.Catalog) -> matcher_mod.Matcher:
    return matcher_mod.build_matcher(catalog)


@pytest.fixture(autouse=True)
def _reuse_matcher(
    monkeypatch: pytest.MonkeyPatch, catalog: catalog_mod.Catalog, compiled_matcher: matcher_mod.Matcher
) -> None:
    """Compiling the catalog takes a few hundred milliseconds; every engine here gets the same
    (stateless, real) matcher for the session catalog instead of compiling it again."""
    build = matcher_mod.build_matcher

    def cached(wanted: catalog_mod.Catalog, engine: str = "auto") -> matcher_mod.Matcher:
        if wanted is catalog and engine == "auto":
            return compiled_matcher
        return build(wanted, engine)

    monkeypatch.setattr(matcher_mod, "build_matcher", cached)


@pytest.fixture
async def make_harness(tmp_path: Path, catalog: catalog_mod.Catalog) -> AsyncIterator[scenario.MakeHarness]:
    """``await make_harness(policies=YAML, **EngineSettings fields)``; defaults: the two POLICIES,
    the cluster-wide Action switch on, a 30 s grace for finished jobs."""
    made: list[scenario.Harness] = []

    async def make(policies: str = scenario.POLICIES, **settings: Any) -> scenario.Harness:
        store = await database.open_store(f"sqlite+aiosqlite:///{tmp_path / f'audit{len(made)}.db'}")
        manual = clock.ManualClock(scenario.START)
        scheduler = fake_scheduler.FakeScheduler(nodes=scenario.NODES)
        engine = engine_mod.Engine(
            scheduler, store, loader.parse_text(policies, "test policies"), catalog, clock_=manual,
            settings=settings_mod.EngineSettings(**{"allow_action": True, **settings}),
        )
        harness = scenario.Harness(tmp_path, manual, scheduler, store, engine)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        for engine in [harness.engine, *harness.extra_engines]:
            for rt in engine.runtimes.values():
                if rt.task is not None and not rt.task.done():
                    rt.task.cancel()
                for t in rt.tailers:
                    t.close()
        # The replay property over every scenario's journal: each recorded decision replays exactly.
        await journal_replay.check(harness.store)
        await harness.store.close()
