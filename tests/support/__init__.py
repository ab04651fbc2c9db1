"""Test support: session fixtures for the real local services the integration tests need.

``tests.support.slurm`` brings up the local Slurm cluster (``hack/local-slurm.sh``) and
``tests.support.postgres`` the local PostgreSQL (``hack/local-postgres.sh``); both are
registered as pytest plugins by ``tests/conftest.py``. ``tests.support.services`` holds what
they share: reading the scripts' env files and the start/stop bookkeeping that lets several
pytest sessions share one running service. Import as ``from tests.support import slurm``.
"""
