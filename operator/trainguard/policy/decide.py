"""The policy decision: (anomaly, verdict, history, job) under a RecoveryPolicy -> Advice.

Place in the loop: after attribution (``attribute.rules`` / ``attribute.external`` -> Verdict),
before the audit log and the executor (``act.executor`` carries the Advice out in Action mode,
only records it in Monitor mode; ``policy.blast_radius`` may still block it). Pure and
deterministic: same inputs, same Advice, so a recorded history can be replayed (backtest).

The rules, in order; each appends a reason to the Advice:

1. Nothing to do for a healthy anomaly or a job that completed.
2. The job's exit code is a "do not requeue" code (``doNotRequeueExitCodes``, NVRx 93): stop;
   or nothing if the job already ended and cannot be requeued anyway. The job's own request
   comes before the policy's rules.
3. What the failure asks for: the first of the policy's ``rules`` that matches (symptoms,
   attributions, categories, exit codes; ``match_rule``) decides: Requeue, RequeueExcluding
   (the suspects and lemon nodes become exclusion candidates), Stop, Hold or Ignore. Without
   a matching rule, the built-in behaviour: a straggler/throughput drop gets nothing unless
   ``throughputDropAction: requeue`` (then a requeue without the slow node the verdict names, and
   a reason that says so when it names none); an application
   failure gets ``applicationErrorAction``; hardware, system, unknown failures and hangs get a
   requeue (the executor cancels/requeues a hung attempt). Hardware suspects (and lemon nodes
   of the verdict) become exclusion candidates when ``excludeOnHardware``.
4. A requeue must fit the budget: ``retries_used >= maxRetries`` or
   ``attemptsWithoutCheckpoint >= maxAttemptsWithoutCheckpoint`` turns it into stop.
5. A requeue on a job that cannot be requeued (``--no-requeue``) becomes nothing, except for a
   hang: a hung job does not end by itself, so it is stopped (hold, then nothing, if stop is
   not allowed). A hang past the retry budget is stopped by rule 4.
6. Exclusions (``exclude_nodes`` is the whole desired set, so the executor's merge is idempotent):
   only nodes the workload ran on (``allocation``: any attempt's, not only the current one's);
   merged with those already excluded (the user's own ``--exclude`` stays);
   ``maxExcludedNodesPerJob`` caps only Trainguard's own exclusions (``own_exclusions``, from its
   action rows), never the user's; dropped (with a reason) if the partition would keep fewer
   nodes than the job needs.
7. Lemon nodes of the verdict are drained when ``drainLemonNodes`` and ``drainNode`` or
   ``cordonNode`` is allowed, and only if the scheduler placed the workload there
   (``allocation``).
8. An action the policy does not allow becomes the nearest allowed one, ``FALLBACKS``:
   stop -> hold -> none (hold still keeps the job from burning GPUs until a human looks),
   requeue -> none, hold -> none. Exclusions go with the requeue.

Monitor mode produces the same advice with ``mode=Monitor``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from trainguard.model import advice, anomalies, evidence, vocab, workloads
from trainguard.model import verdicts as verdicts_model
from trainguard.policy import ledger, model

Action = vocab.AdviceAction

FALLBACKS: Mapping[vocab.AdviceAction, tuple[vocab.AdviceAction, ...]] = {
    Action.STOP: (Action.STOP, Action.HOLD, Action.NONE),
    Action.REQUEUE: (Action.REQUEUE, Action.NONE),
    Action.HOLD: (Action.HOLD, Action.NONE),
    Action.NONE: (Action.NONE,),
}
"""For each wanted action, the actions to try in order when the policy does not allow it."""

_STRAGGLER = frozenset({vocab.Category.THROUGHPUT_DROP})


def decide(
    spec: model.RecoveryPolicySpec,
    *,
    workload: str,
    attempt: int,
    anomaly: anomalies.Anomaly,
    verdict: verdicts_model.Verdict,
    history: ledger.WorkloadHistory,
    job: workloads.JobSnapshot,
    generation: int,
    now: float,
    policy_name: str = "",
    partition_nodes: int | None = None,
    own_exclusions: Collection[str] | None = None,
    allocation: Collection[str] | None = None,
    node_actions: Collection[str] = ("drainNode",),
) -> advice.Advice:
    """The Advice of generation ``generation`` for (``workload``, ``attempt``).

    ``partition_nodes`` is the number of usable nodes in the job's partition, if known; it
    guards against excluding so many nodes that the job can no longer be scheduled.
    ``own_exclusions`` are the nodes Trainguard itself excluded for this workload (None: the
    ledger's); ``allocation`` every node an attempt of it was placed on (None: the job's nodes).
    ``node_actions`` are the policy actions by which this installation takes a node out of service
    (``schedulers.base.node_actions``: ``drainNode``, and ``cordonNode`` on Slinky).
    """
    reasons: list[str] = []

    def make(
        action: vocab.AdviceAction, exclude: Sequence[str] = (), drain: Sequence[str] = (), delay: float = 0.0
    ) -> advice.Advice:
        return advice.Advice(
            workload=workload,
            attempt=attempt,
            generation=generation,
            action=action,
            exclude_nodes=list(exclude),
            drain_nodes=list(drain),
            drain_in_scheduler=bool({str(a) for a in spec.actions.allowed} & set(node_actions)),
            reasons=reasons,
            mode=spec.mode,
            deadline=now + delay + spec.watchdog.deadline,
            release_at=now + delay if delay > 0 else None,
            decided_by=vocab.Decider.POLICY_ENGINE,
            policy=policy_name,
        )

    if anomaly.symptom == vocab.Symptom.HEALTHY or (
        anomaly.category == vocab.Category.NONE and verdict.attribution == vocab.Attribution.NONE
    ):
        reasons.append("no failure: nothing to do")
        return make(Action.NONE)
    if job.state == workloads.JobState.COMPLETED:
        reasons.append("the job completed successfully: nothing to do")
        return make(Action.NONE)

    if job.exit_code is not None and job.exit_code in spec.do_not_requeue_exit_codes:
        if job.state.finished and not job.requeue_allowed:
            reasons.append(f"exit code {job.exit_code} means 'do not requeue' and the job has ended: nothing to do")
            return make(Action.NONE)
        reasons.append(f"exit code {job.exit_code} means 'do not requeue' (doNotRequeueExitCodes): stop")
        return make(_allowed(spec, Action.STOP, reasons))

    rule = match_rule(spec, anomaly, verdict, job)
    if rule is not None:
        wanted, candidates = _from_rule(spec, rule, anomaly, verdict, reasons)
    else:
        wanted, candidates = _wanted(spec, anomaly, verdict, reasons)
    exclude: list[str] = []
    drain: list[str] = []
    if wanted == Action.REQUEUE:
        wanted = _budget(spec, attempt, history, job, reasons)
    if wanted == Action.REQUEUE and not job.requeue_allowed:
        if anomaly.symptom == vocab.Symptom.HANG and not job.state.finished:
            # A hung job does not end by itself: left alone it holds its nodes until its time limit.
            reasons.append("the job cannot be requeued (submitted with --no-requeue) and is hung: stop")
            wanted = Action.STOP
        else:
            reasons.append("the job cannot be requeued (submitted with --no-requeue): nothing to do")
            wanted = Action.NONE
    if wanted == Action.REQUEUE:
        exclude = _exclusions(
            spec, candidates, history=history, job=job, partition_nodes=partition_nodes, reasons=reasons,
            own=own_exclusions, allocation=allocation,
        )
    if verdict.lemon_nodes and wanted != Action.NONE:
        drain = _drains(spec, _placed(verdict.lemon_nodes, job, allocation, reasons), reasons, node_actions)

    action = _allowed(spec, wanted, reasons)
    if action != Action.REQUEUE and exclude:
        exclude = []
    delay = 0.0
    if action == Action.REQUEUE:
        delay = retry_delay(spec, attempt)  # retry number attempt + 1 of this workload
        if delay > 0:
            reasons.append(f"retry backoff: released {delay:.0f} s after the requeue (retries.backoff)")
    if spec.mode == vocab.Mode.MONITOR:
        reasons.append("Monitor mode: recorded, not carried out")
    return make(action, exclude, drain, delay)


def retry_delay(spec: model.RecoveryPolicySpec, retries_used: int) -> float:
    """Seconds to wait before retry number ``retries_used + 1`` may start (``retries.backoff``).

    The first retry is immediate (most failures are one-off: a bad node excluded, a transient
    fault); retry ``n + 1`` for ``n >= 1`` waits ``initialSeconds * factor ** (n - 1)``, capped at
    ``maxSeconds``. The Advice carries it as ``release_at``; the executor requeues held and releases
    the job then.
    """
    backoff = spec.retries.backoff
    if retries_used <= 0:
        return 0.0
    exponent = min(retries_used - 1, 64)
    return float(min(backoff.max_seconds, backoff.initial_seconds * backoff.factor**exponent))


def _wanted(
    spec: model.RecoveryPolicySpec,
    anomaly: anomalies.Anomaly,
    verdict: verdicts_model.Verdict,
    reasons: list[str],
) -> tuple[vocab.AdviceAction, list[str]]:
    """What the failure itself asks for, and the nodes a requeue should avoid."""
    lemons = list(verdict.lemon_nodes)
    if anomaly.symptom == vocab.Symptom.STRAGGLER or verdict.category in _STRAGGLER:
        if spec.detection.throughput_drop_action == "off":
            reasons.append("throughput drop: detected and recorded; throughputDropAction is off")
            return Action.NONE, []
        avoid = list(dict.fromkeys([*verdict.suspect_nodes, *lemons]))
        if verdict.suspect_nodes:
            slow = list(dict.fromkeys(verdict.suspect_nodes))
            noun = "node" if len(slow) == 1 else "nodes"
            reasons.append(
                f"throughput drop and throughputDropAction is requeue: requeue without the slow {noun} "
                f"({', '.join(slow)})"
            )
        else:
            # Say so rather than promise an exclusion: the requeued job may land on the same nodes.
            tail = f" without the lemon nodes ({', '.join(lemons)})" if lemons else " (it may land on the same nodes)"
            reasons.append(
                "throughput drop and throughputDropAction is requeue: no slow node could be named (no rank fell "
                f"behind the others), so none is excluded for it: requeue{tail}"
            )
        return Action.REQUEUE, avoid

    if any(item.pattern == evidence.METRIC_FAULT_PATTERN for item in anomaly.evidence) and (
        spec.detection.gpu_metric_action == "record"
    ):
        reasons.append("hardware fault in the GPU metrics of a running job: recorded; gpuMetricAction is record")
        return Action.NONE, []

    if verdict.attribution == vocab.Attribution.APPLICATION:
        if spec.application_error_action == "stop":
            reasons.append(f"application failure ({verdict.category}) and applicationErrorAction is stop")
            return Action.STOP, []
        reasons.append(f"application failure ({verdict.category}): requeue within the retry budget")
        return Action.REQUEUE, []

    kind = "hang" if anomaly.symptom == vocab.Symptom.HANG else f"{verdict.attribution} failure"
    reasons.append(f"{kind} ({verdict.category}): requeue")
    candidates: list[str] = []
    if spec.exclusion.exclude_on_hardware:
        if verdict.attribution == vocab.Attribution.HARDWARE:
            candidates.extend(verdict.suspect_nodes)
        candidates.extend(lemons)
    elif verdict.attribution == vocab.Attribution.HARDWARE and verdict.suspect_nodes:
        reasons.append("excludeOnHardware is false: the suspect nodes are not excluded")
    return Action.REQUEUE, list(dict.fromkeys(candidates))


_RULE_ACTIONS: Mapping[model.RuleAction, vocab.AdviceAction] = {
    model.RuleAction.REQUEUE: Action.REQUEUE,
    model.RuleAction.REQUEUE_EXCLUDING: Action.REQUEUE,
    model.RuleAction.STOP: Action.STOP,
    model.RuleAction.HOLD: Action.HOLD,
    model.RuleAction.IGNORE: Action.NONE,
}


def match_rule(
    spec: model.RecoveryPolicySpec,
    anomaly: anomalies.Anomaly,
    verdict: verdicts_model.Verdict,
    job: workloads.JobSnapshot,
) -> tuple[int, model.Rule] | None:
    """The first of ``spec.rules`` that matches this failure, with its index; None if none does.

    An exit code condition needs the job to have ended with that code: a running job (a hang, a
    crash seen in the output before the exit) has no exit code yet.
    """
    exit_code = job.exit_code if job.state.finished else None
    for index, rule in enumerate(spec.rules):
        m = rule.match
        if m.symptoms and anomaly.symptom not in m.symptoms:
            continue
        if m.attributions and verdict.attribution not in m.attributions:
            continue
        if m.categories and verdict.category not in m.categories:
            continue
        if m.exit_codes and (exit_code is None or exit_code not in m.exit_codes):
            continue
        return index, rule
    return None


def _describe_match(match: model.RuleMatch) -> str:
    parts = [
        f"{name} {', '.join(str(v) for v in values)}"
        for name, values in (
            ("symptoms", match.symptoms), ("attributions", match.attributions), ("categories", match.categories),
            ("exitCodes", match.exit_codes),
        )
        if values
    ]
    return "; ".join(parts) or "any failure"


def _from_rule(
    spec: model.RecoveryPolicySpec,
    found: tuple[int, model.Rule],
    anomaly: anomalies.Anomaly,
    verdict: verdicts_model.Verdict,
    reasons: list[str],
) -> tuple[vocab.AdviceAction, list[str]]:
    """What a matching rule asks for, and the nodes a requeue should avoid."""
    index, rule = found
    reasons.append(
        f"rule {index} ({_describe_match(rule.match)}) matched {anomaly.symptom} {verdict.attribution} "
        f"({verdict.category}): {rule.action}"
    )
    if rule.action != model.RuleAction.REQUEUE_EXCLUDING:
        return _RULE_ACTIONS[rule.action], []
    return Action.REQUEUE, list(dict.fromkeys([*verdict.suspect_nodes, *verdict.lemon_nodes]))


def _budget(
    spec: model.RecoveryPolicySpec,
    attempt: int,
    history: ledger.WorkloadHistory,
    job: workloads.JobSnapshot,
    reasons: list[str],
) -> vocab.AdviceAction:
    """Requeue if the retry and no-progress budgets allow it, else stop."""
    used = max(history.retries_used, job.attempt, attempt)
    limit = spec.retries.max_retries
    if used >= limit:
        reasons.append(f"retries exhausted ({used} of maxRetries {limit}): stop")
        return Action.STOP
    without = history.attempts_without_checkpoint(upto=attempt)
    if history.get(attempt) is None:
        without += 1
    ceiling = spec.retries.max_attempts_without_checkpoint
    if without >= ceiling:
        reasons.append(
            f"{without} attempts in a row without a new checkpoint (maxAttemptsWithoutCheckpoint {ceiling}): "
            "a retry cannot make progress: stop"
        )
        return Action.STOP
    reasons.append(f"retry {used + 1} of {limit}; {without} attempt(s) without a new checkpoint (limit {ceiling})")
    return Action.REQUEUE


def _exclusions(
    spec: model.RecoveryPolicySpec,
    candidates: Sequence[str],
    *,
    history: ledger.WorkloadHistory,
    job: workloads.JobSnapshot,
    partition_nodes: int | None,
    reasons: list[str],
    own: Collection[str] | None = None,
    allocation: Collection[str] | None = None,
) -> list[str]:
    """All nodes the requeued job must avoid (already excluded plus new ones), or [] to exclude none.

    The cap counts only ``own`` (ours); the rest of ``already`` is the user's and stays as it is.
    A candidate must be a node the workload ran on: the job's current nodes or, when known, any
    node an attempt of it was placed on. The failed attempt's nodes may already be gone from the
    job when the decision is made (a PyTorchJob's training-operator re-creates a failed worker on
    another node within a second; a requeued Slurm job is placed again), and that node is the one
    to avoid.
    """
    already = list(dict.fromkeys([*job.excluded_nodes, *history.excluded_nodes]))
    ours = list(dict.fromkeys(own if own is not None else history.excluded_nodes))
    fresh = [node for node in candidates if node not in already]
    placed = {*job.nodes, *(allocation or ())}
    if placed:
        foreign = [node for node in fresh if node not in placed]
        if foreign:
            reasons.append(f"not excluded, the workload did not run there: {', '.join(foreign)}")
        fresh = [node for node in fresh if node in placed]
    if not fresh:
        return already
    cap = spec.exclusion.max_excluded_nodes_per_job
    room = max(0, cap - len(ours))
    if room < len(fresh):
        counted = f" (ours: {', '.join(ours)})" if ours else ""
        reasons.append(
            f"maxExcludedNodesPerJob {cap} reached{counted}: not excluded: {', '.join(fresh[room:])}"
            if room == 0
            else f"maxExcludedNodesPerJob {cap}{counted}: only {', '.join(fresh[:room])} excluded, "
            f"not {', '.join(fresh[room:])}"
        )
        fresh = fresh[:room]
    if not fresh:
        return already
    total = [*already, *fresh]
    if partition_nodes is not None:
        needed = job.min_nodes if job.min_nodes is not None else max(1, len(job.nodes))
        remaining = partition_nodes - len(total)
        if remaining < needed:
            reasons.append(
                f"excluding {', '.join(total)} would leave {remaining} of {partition_nodes} nodes for a job that "
                f"needs {needed}: requeue without new exclusions"
            )
            return already
    reasons.append(f"exclude {', '.join(fresh)}" + (f" (already excluded: {', '.join(already)})" if already else ""))
    return total


def _placed(
    nodes: Sequence[str], job: workloads.JobSnapshot, allocation: Collection[str] | None, reasons: list[str]
) -> list[str]:
    """``nodes`` the scheduler placed the workload on; the others are named in a reason and dropped.

    Without an allocation the job's current nodes stand in; with neither, nothing can be checked
    (a caller without a scheduler) and ``nodes`` pass unchanged.
    """
    placed = allocation if allocation is not None else (job.nodes or None)
    if placed is None:
        return list(nodes)
    foreign = [node for node in nodes if node not in placed]
    if foreign:
        reasons.append(f"not drained, the workload never ran there: {', '.join(foreign)}")
    return [node for node in nodes if node in placed]


def _drains(spec: model.RecoveryPolicySpec, lemons: Sequence[str], reasons: list[str],
            node_actions: Collection[str]) -> list[str]:
    """The lemon nodes the advice names to take out of service. They are carried out only when the
    policy allows one of the installation's ``node_actions``; otherwise they stay on record and the
    reason says why nothing happens to them."""
    if not lemons or not spec.exclusion.drain_lemon_nodes:
        return []
    allowed = {str(a) for a in spec.actions.allowed}
    if model.ActionName.DRAIN_NODE not in allowed and model.ActionName.CORDON_NODE not in allowed:
        reasons.append(
            f"drainLemonNodes is on but neither drainNode nor cordonNode is allowed: {', '.join(lemons)} not drained"
        )
        return []
    if not allowed & set(node_actions):
        reasons.append(f"lemon node(s) {', '.join(lemons)} not drained: the policy allows only cordonNode, and this "
                       "installation cordons no Kubernetes node behind its Slurm nodes (Slinky: --slinky-namespace)")
        return list(lemons)
    reasons.append(f"drain lemon node(s) {', '.join(lemons)} (drainLemonNodes)")
    return list(lemons)


def _allowed(spec: model.RecoveryPolicySpec, wanted: vocab.AdviceAction, reasons: list[str]) -> vocab.AdviceAction:
    """``wanted`` if the policy allows it, else the first allowed fallback (``FALLBACKS``)."""
    allowed = {str(name) for name in spec.actions.allowed}
    for candidate in FALLBACKS[wanted]:
        if candidate == Action.NONE or candidate.value in allowed:
            if candidate != wanted:
                reasons.append(
                    f"{wanted} is not in actions.allowed ({', '.join(sorted(allowed))}): {candidate} instead"
                )
            return candidate
    return Action.NONE
