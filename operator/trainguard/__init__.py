"""Trainguard: a recovery operator for distributed AI training.

The loop: signals -> detect -> attribute -> policy -> act -> store. Each stage is a
sub-package; ``engine`` wires them; ``cli``, ``k8s`` and ``console`` are thin shells.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
