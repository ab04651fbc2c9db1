"""The audit store: SQL persistence of every record of the loop (SQLAlchemy 2 async + Alembic).

``database.open_store(url)`` opens and migrates; ``audit.AuditStore`` is the repository;
``tables`` is the schema; ``alembic/`` holds the migrations run on start.
"""
