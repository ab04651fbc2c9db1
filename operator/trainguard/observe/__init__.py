"""Observing the loop from outside: Prometheus metrics of the engine (``metrics``)."""
