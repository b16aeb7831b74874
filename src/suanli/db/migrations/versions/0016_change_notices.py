"""A commit that changes what a tenant's listing pages show says so, per tenant, where
another process can see it without reading the pages (``db.changes``): triggers on each
table a page's stamps read (its rows, their waiting reasons, prices, subscriptions).
Tenant 0 stands for every tenant (a price, a subscription, a waiting reason of a row
that is gone).

PostgreSQL: each changed row notifies channel ``suanli_changes`` with its tenant; the
server delivers notices at commit, once per transaction and payload, never for one
rolled back, and writers take no lock they did not take before. SQLite cannot notify
another process, and has one writer at a time: there the triggers count commits per
tenant in ``page_changes``, in the writer's own transaction (PostgreSQL leaves it empty).

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

CHANNEL = "suanli_changes"
#: a table, and the tenant a changed row ``r`` (NEW or OLD) belongs to, as SQL
TENANT_OF = {
    "instances": "{r}.tenant_id",
    "jobs": "{r}.tenant_id",
    "waiting_reasons": (
        "coalesce((SELECT tenant_id FROM instances WHERE {r}.kind = 'instance' AND id = {r}.workload_id),"
        " (SELECT tenant_id FROM jobs WHERE {r}.kind = 'job' AND id = {r}.workload_id), 0)"
    ),
    "billing_price_versions": "0",
    "billing_subscriptions": "0",
}
OPS = {"INSERT": "NEW", "UPDATE": "NEW", "DELETE": "OLD"}

PG_FUNCTION = f"""
CREATE FUNCTION suanli_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
    tenant bigint := 0;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    IF TG_TABLE_NAME IN ('instances', 'jobs') THEN
        tenant := r.tenant_id;
    ELSIF TG_TABLE_NAME = 'waiting_reasons' THEN
        tenant := {TENANT_OF["waiting_reasons"].format(r="r")};
    END IF;
    PERFORM pg_notify('{CHANNEL}', tenant::text);
    RETURN NULL;
END $$
"""


def upgrade() -> None:
    op.create_table(
        "page_changes",
        sa.Column("tenant_id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("seq", sa.BigInteger(), nullable=False, server_default="0"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_FUNCTION)
        for table in TENANT_OF:
            op.execute(
                f"CREATE TRIGGER suanli_change_notice AFTER INSERT OR UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION suanli_notify_change()"
            )
        return
    for table, tenant in TENANT_OF.items():
        for event, r in OPS.items():
            of = tenant.format(r=r)
            op.execute(
                f"CREATE TRIGGER suanli_change_{table}_{event.lower()} AFTER {event} ON {table} BEGIN "
                f"INSERT OR IGNORE INTO page_changes (tenant_id, seq) VALUES ({of}, 0); "
                f"UPDATE page_changes SET seq = seq + 1 WHERE tenant_id = {of}; END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in TENANT_OF:
            op.execute(f"DROP TRIGGER suanli_change_notice ON {table}")
        op.execute("DROP FUNCTION suanli_notify_change()")
    else:
        for table in TENANT_OF:
            for event in OPS:
                op.execute(f"DROP TRIGGER suanli_change_{table}_{event.lower()}")
    op.drop_table("page_changes")
