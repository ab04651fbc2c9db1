"""Scheduler adapters: one Protocol (``base.Scheduler``), one module per transport."""
