"""Which policy covers each workload, and in which mode it acts.

Place: a step module of the engine, below tracking (which asks it for a new job's policy) and the
recovery runner (which asks it for the undrain rule and a policy that vanished). The effective
policy is the routed RecoveryPolicy plus the job comment's overrides, the shell's per-workload
overrides and mode override; the mode it acts in follows the one rule ``act.switch.effective_mode``
(the cluster switch off: Monitor, whatever the policy says).
"""

from __future__ import annotations

from trainguard.act import switch as switch_mod
from trainguard.act import undrain, validate
from trainguard.detect import catalog as catalog_mod
from trainguard.detect import matcher as matcher_mod
from trainguard.engine import runtime
from trainguard.model import routing, user_regex, vocab, workloads
from trainguard.policy import loader, overrides
from trainguard.policy import model as policy_model


class PolicyResolver:
    """The policy set with the shell's overrides, resolved for each workload."""

    def __init__(self, policies: loader.PolicySet, catalog: catalog_mod.Catalog, *, allow_action: bool,
                 runtimes: runtime.Runtimes) -> None:
        self.policies = policies
        self.catalog = catalog
        self.allow_action = allow_action
        """The cluster-wide switch this engine runs with (``EngineSettings.allow_action``)."""
        self.runtimes = runtimes
        self.mode_overrides: dict[str, vocab.Mode] = {}
        self.workload_overrides: dict[str, dict[str, object]] = {}
        """Workload -> policy overrides set by the shell (WorkloadRecovery ``spec.overrides``)."""
        self._matchers: dict[str, matcher_mod.Matcher] = {}
        """Compiled matchers by the policy's extra patterns (most policies share ``_base_matcher``)."""
        self._base_matcher = matcher_mod.build_matcher(catalog)

    def effective(
        self, job: workloads.JobSnapshot, opt_in: overrides.OptIn
    ) -> tuple[policy_model.RecoveryPolicySpec | None, list[str], routing.Route]:
        """The policy covering ``job`` (``loader.PolicySet.route``) with its comment's overrides, the
        workload's mode override and the cluster-wide Action switch applied; None (and why) when no
        policy covers it; and the routing decision."""
        policy, route = self.policies.route(opt_in.policy_name, job)
        if policy is None:
            return None, [route.reason], route
        spec, errors = overrides.resolve(policy.spec, opt_in)
        extra = self.workload_overrides.get(job.workload)
        if extra:  # after the comment's, by the same rules (budgets can only be lowered)
            spec, more = overrides.resolve(spec, overrides.OptIn(overrides=dict(extra)))
            errors = [*errors, *more]
        forced = self.mode_overrides.get(job.workload)
        if forced is not None:
            spec = spec.model_copy(update={"mode": forced})
        mode = switch_mod.effective_mode(spec.mode, self.allow_action)
        if mode != spec.mode:
            spec = spec.model_copy(update={"mode": mode})
        return spec, errors, route

    def update(self, policies: loader.PolicySet) -> None:
        """Swap the policy set; tracked workloads take the new effective policy at once."""
        self.policies = policies
        self.refresh()

    def set_mode_override(self, workload: str, mode: vocab.Mode | None) -> None:
        """A per-workload mode override (WorkloadRecovery spec); None removes it."""
        if mode is None:
            self.mode_overrides.pop(workload, None)
        else:
            self.mode_overrides[workload] = mode
        self.refresh()

    def set_workload_overrides(self, workload: str, values: dict[str, object]) -> None:
        """Per-workload policy overrides from the shell; empty removes them."""
        if values:
            self.workload_overrides[workload] = dict(values)
        else:
            self.workload_overrides.pop(workload, None)
        self.refresh()

    def refresh(self) -> None:
        """Every tracked workload's effective policy again (the set or an override changed)."""
        for rt in self.runtimes.values():
            opt_in = overrides.parse_opt_in(rt.job.comment)
            if opt_in is None:
                continue
            spec, errors, route = self.effective(rt.job, opt_in)
            rt.route, rt.policy_name = route, route.policy or opt_in.policy_name or ""
            if spec is not None:
                rt.matcher = self.matcher_for(spec)
            rt.checkpoint_re = user_regex.compile(spec.detection.checkpoint_regex) if spec is not None else None
            rt.spec = spec
            rt.opt_in_errors = errors

    def matcher_for(self, spec: policy_model.RecoveryPolicySpec) -> matcher_mod.Matcher:
        """One compiled matcher per policy (its extra patterns extend the catalog)."""
        if not spec.detection.extra_patterns:
            return self._base_matcher
        # Keyed by the patterns themselves, not their ids: a policy that changes a pattern's regex
        # under the same id must get a new matcher.
        key = "\n".join(p.model_dump_json() for p in spec.detection.extra_patterns)
        if key not in self._matchers:
            self._matchers[key] = matcher_mod.build_matcher(self.catalog.extended(spec.detection.extra_patterns))
        return self._matchers[key]

    def undrain_rule(self, policy_name: str, paused: str | None) -> undrain.UndrainRule | None:
        """``exclusion.undrainAfter``, ``lemonNodeWindow`` (repeat offenders), ``validation`` (the check before
        the return) and the effective mode of the policy that drained a node, while actions are ``paused``
        (the reason) or not."""
        policy = self.policies.get(policy_name or None)
        if policy is None:
            return None
        spec = policy.spec.exclusion.validation
        check = (validate.Check(tuple(spec.command), spec.timeout, spec.output_dir, spec.partition, spec.image)
                 if spec else None)
        return undrain.UndrainRule(policy.spec.exclusion.undrain_after,
                                   switch_mod.effective_mode(policy.spec.mode, self.allow_action, paused),
                                   lemon_window_s=policy.spec.exclusion.lemon_node_window, validation=check)
