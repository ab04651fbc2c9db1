"""The web console: static HTML/CSS/ES modules served from the package at ``/`` (``web.routes``).

No build step and no CDN (clusters are often air-gapped): the files under ``static/`` are what the
browser runs. Every piece of data comes from the HTTP API (``/api/v1``) and its Server-Sent Events
stream; the console holds no state of its own (who the user is travels in the HttpOnly session
cookie of the server's login form, ``http/login.py``, which no script can read).
"""
