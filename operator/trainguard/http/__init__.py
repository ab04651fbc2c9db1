"""Trainguard's HTTP surface (``--http-listen HOST:PORT``), one aiohttp application (``app.build_app``):
the probes and ``/metrics`` (``app``), the API ``/api/v1`` (``api`` mounts its route modules, behind
``auth`` and ``login``) and the console's pages, which the console adds as routes."""
