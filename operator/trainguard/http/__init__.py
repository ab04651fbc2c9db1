"""Trainguard's HTTP surface (``--http-listen HOST:PORT``): health probes and metrics today; the
console and the API add their routes to the same application (``app.build_app``)."""
