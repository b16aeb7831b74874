"""Alembic environment: runs online against the engine handed in by ``suanli.db.migrate``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from suanli.db.models import Base

config = context.config
target_metadata = Base.metadata


def run() -> None:
    engine = config.attributes.get("engine")
    if engine is None:
        url = config.get_main_option("sqlalchemy.url")
        if not url:
            raise SystemExit("alembic: no database (set sqlalchemy.url or pass an engine)")
        engine = create_engine(url)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


run()
