"""The signal journal: each decision's inputs recorded by the engine, replayed under a policy, backtested."""
