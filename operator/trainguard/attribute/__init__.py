"""The attribution stage: Anomaly -> Verdict (hardware / system / application / unknown, suspects).

``rules`` are the built-in, pure rules with lemon-node memory (``lemon``); ``external`` asks an
optional HTTP service and falls back to the built-in verdict. Imports only ``model``.
"""
