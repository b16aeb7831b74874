"""Persistence: SQLAlchemy models, engine/session setup and Alembic migrations.

SQLite (the embedded default) and PostgreSQL are both first-class; every test
that touches the database runs on both.
"""

from suanli.db.session import Database, default_sqlite_url

__all__ = ["Database", "default_sqlite_url"]
