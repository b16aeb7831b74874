"""Apply the Alembic migrations shipped inside the package, without an alembic.ini."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    cfg.attributes["engine"] = engine
    return cfg


@cache
def head() -> str | None:
    """The newest revision shipped (read once: it loads every migration script)."""
    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision``; a no-op when it is already there. A database at
    the head is told by one read of ``alembic_version``, without starting Alembic's
    environment (which imports every migration): servers and tests start often."""
    if revision == "head":
        with engine.connect() as conn:
            if MigrationContext.configure(conn).get_current_revision() == head():
                return
    command.upgrade(alembic_config(engine), revision)
