"""The policy stage: RecoveryPolicy (``model``, ``loader``, ``overrides``), the per-workload
``ledger``, the decision (``decide`` -> Advice) and the ``blast_radius`` breaker.

Sits between attribution (Verdict) and the audit log/executor; imports only ``model``.
"""
