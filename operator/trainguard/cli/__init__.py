"""The ``trainguard`` command line: thin shells over the engine's functions."""
