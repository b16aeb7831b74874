"""Alembic migrations (package data; applied at server start)."""
