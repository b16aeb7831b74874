"""Schema: the Alembic migrations build exactly the models, idempotently, on
both databases; the capacity constraints refuse over-allocation by themselves."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, update
from sqlalchemy.exc import IntegrityError

import suanli.billing.tables  # noqa: F401  (registers the billing tables on Base.metadata)
from suanli.db.migrate import alembic_config
from suanli.db.models import Base, Gpu, Node, Tenant
from suanli.db.session import Database, sqlite_path


def test_migrations_match_models_and_rerun(db_url: str) -> None:
    path = sqlite_path(db_url)
    if path is not None:
        path.unlink()  # from nothing: db_url hands out a migrated copy
    db = Database(db_url)
    try:
        db.migrate()
        db.migrate()  # second start: nothing to do
        with db.engine.connect() as c:
            assert compare_metadata(MigrationContext.configure(c), Base.metadata) == []
            head = ScriptDirectory.from_config(alembic_config(db.engine)).get_current_head()
            assert c.exec_driver_sql("SELECT version_num FROM alembic_version").scalar() == head
        assert {"tenants", "users", "api_tokens", "nodes", "gpus", "instances", "jobs", "allocations", "events"} <= set(
            inspect(db.engine).get_table_names()
        )
    finally:
        db.dispose()


def test_check_constraints_refuse_overallocation(db_url: str) -> None:
    db = Database(db_url)
    try:
        db.migrate()
        with db.transaction() as s:
            s.add(Tenant(name="t"))
            node = Node(name="n", gpu_model="H100", gpu_count=1, cpu_milli=1000, memory_mib=1024)
            s.add(node)
            s.flush()
            s.add(Gpu(node_id=node.id, index=0, model="H100", used_milli=600))
        for stmt in (
            update(Gpu).values(used_milli=Gpu.used_milli + 500),
            update(Gpu).values(used_milli=Gpu.used_milli - 700),
            update(Node).values(cpu_used=Node.cpu_used + 1001),
        ):
            with pytest.raises(IntegrityError):
                with db.transaction() as s:
                    s.execute(stmt)
        with db.sessions() as s:
            assert s.get(Gpu, 1).used_milli == 600
    finally:
        db.dispose()
