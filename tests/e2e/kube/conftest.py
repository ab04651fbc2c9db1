"""Fixtures of the operator's end-to-end tier: the real local kube-apiserver (``tests.support.kube``).

The root conftest registers only the Slurm and PostgreSQL plugins; the ``kube_api`` session
fixture is imported here so these tests need no change outside this folder.
"""

from __future__ import annotations

from tests.support.kube import kube_api

__all__ = ["kube_api"]
