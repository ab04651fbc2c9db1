"""A policy's extra patterns extend the catalog for the workloads it covers, and a changed pattern
(same id, new regex) is compiled anew when the policy changes (a running attempt keeps the
detector it started with; the next attempt uses the new matcher)."""

from __future__ import annotations

from tests.unit.engine import scenario
from trainguard.policy import loader


def _policy(regex: str) -> str:
    return f"""
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {{name: default}}
spec:
  mode: Monitor
  detection:
    settle: 1s
    extraPatterns:
      - id: site.scheduler_fence
        category: filesystem_io
        attribution_hint: system
        severity: fatal
        regex: '{regex}'
        examples: ['FENCE-A lost lease on /lustre']
"""


async def test_a_changed_extra_pattern_replaces_the_compiled_one(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness(policies=_policy("FENCE-A lost lease"))
    h.submit("51", "trainguard")
    await h.step()
    assert h.runtime("51").matcher.match("FENCE-A lost lease on /lustre") == ["site.scheduler_fence"]

    h.engine.update_policies(loader.parse_text(_policy("FENCE-B lost lease"), "changed"))
    matcher = h.runtime("51").matcher
    assert matcher.match("FENCE-B lost lease on /lustre") == ["site.scheduler_fence"]
    assert matcher.match("FENCE-A lost lease on /lustre") == []
