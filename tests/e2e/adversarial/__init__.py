"""Adversarial scenarios on the real components: what real clusters do that the happy path assumes away.

Each module holds one class of surprise, run against the real local Slurm cluster (and, where it
matters, a real PostgreSQL or kube-apiserver), through the product's outside contracts only
(``trainguard run`` / ``trainguard operator`` processes, ``trainguard audit``, Slurm's own commands):

- ``test_restarts``: the runner killed with SIGKILL between the failure and the requeue, while the
  requeued job is pending, and while the new attempt runs, with appending and truncating output
  files: exactly one requeue, the right exclusions, no old line charged to the new attempt.
- ``test_allocation``: a user's own ``--exclude`` (stays, does not use up our cap) and forged node
  names in log text (a node outside the allocation is never excluded, drained or remembered).
- ``test_limits_and_holds``: blast-radius limits recorded in Monitor mode, per partition; a person's
  hold placed on top of ours is theirs.
- ``test_outages``: the scheduler and the audit database going away and coming back (one log line
  each way, readiness), ``run --once`` against a down scheduler.
- ``test_leadership_handover``: the Lease lost in the middle of a recovery; the old leader's call
  never reaches Slurm, the new leader acts once.
- ``test_own_actions``: the teardown our own requeue causes is not a new failure; a real kill -9 is.
- ``test_routing``: jobs routed to the most specific policy, exit-code rules, a hung job that cannot
  be requeued is stopped, our drains resumed and a person's never.
- ``test_people``: people's decisions are never undone: a user's ``scancel``, endings nobody watched
  (fresh database) and a tracked job failing while we were down (kept one), a scheduler outage in the
  middle of a recovery, a ``--mode monitor`` restart with Action advice pending, a person's requeue
  while our recovery waits, the runtime pause, a node a person took out of service.
- ``test_hostile_regex``: a job's comment regexes run in linear time (RE2); another job's failure is
  still handled in time.

A new class of real-world surprise gets its own module here, with a test that fails on the code
before the fix. The promises these tests prove are listed in ``docs/safety.md``.
"""
