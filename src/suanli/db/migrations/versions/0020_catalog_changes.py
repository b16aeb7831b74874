"""A commit that changes the catalog says so, where another process can see it without
reading the catalog (``db.kept``): the tables every request reads and few change, and
seldom. These are the images offered, the nodes' sizes, the price versions and
subscriptions, the tenants' settings and payment terms, and the rating watermark (a
rating run moves it every 10 s: each process reads the catalog again after it). Counted as migration 0016 counts a tenant's
changes, under tenant -1 (``db.kept.CATALOG``).

A node's own state, the CPU and memory it has in use, and its heartbeat change all the
time and are not the catalog, so an update counts only when it sets another column.

Revision ID: 0020
Revises: 0019
"""

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

CHANNEL = "suanli_changes"
CATALOG = -1
#: a table and what an update must set to change the catalog (None: any column)
TABLES: dict[str, tuple[str, ...] | None] = {
    "images": None,
    "billing_price_versions": None,
    "billing_subscriptions": None,
    "tenants": None,
    "billing_terms": None,
    "billing_state": None,
    "nodes": (
        "name",
        "zone",
        "backend",
        "gpu_model",
        "gpu_count",
        "gpu_memory_mib",
        "cpu_milli",
        "memory_mib",
        "nvlink_islands",
        "ib_leaf",
        "labels",
    ),
}
EVENTS = ("INSERT", "UPDATE", "DELETE")

PG_FUNCTION = f"""
CREATE FUNCTION suanli_notify_catalog() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL}', '{CATALOG}');
    RETURN NULL;
END $$
"""


def _event(event: str, columns: tuple[str, ...] | None) -> str:
    return f"UPDATE OF {', '.join(columns)}" if event == "UPDATE" and columns else event


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_FUNCTION)
        for table, columns in TABLES.items():
            events = " OR ".join(_event(e, columns) for e in EVENTS)
            op.execute(
                f"CREATE TRIGGER suanli_catalog_notice AFTER {events} ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION suanli_notify_catalog()"
            )
        return
    for table, columns in TABLES.items():
        for event in EVENTS:
            op.execute(
                f"CREATE TRIGGER suanli_catalog_{table}_{event.lower()} AFTER {_event(event, columns)} ON {table} BEGIN "
                f"INSERT OR IGNORE INTO page_changes (tenant_id, seq) VALUES ({CATALOG}, 0); "
                f"UPDATE page_changes SET seq = seq + 1 WHERE tenant_id = {CATALOG}; END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in TABLES:
            op.execute(f"DROP TRIGGER suanli_catalog_notice ON {table}")
        op.execute("DROP FUNCTION suanli_notify_catalog()")
    else:
        for table in TABLES:
            for event in EVENTS:
                op.execute(f"DROP TRIGGER suanli_catalog_{table}_{event.lower()}")
