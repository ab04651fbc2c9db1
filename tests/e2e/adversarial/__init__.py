"""Adversarial scenarios on the real components: what real clusters do that the happy path assumes away."""
