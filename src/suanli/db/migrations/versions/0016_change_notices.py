"""On PostgreSQL, a commit that changes what a kept listing page shows says so on a
channel (``db.changes``): a statement-level trigger on each table a page's stamps read
(its rows, their waiting reasons, prices, subscriptions) calls ``pg_notify``, which the
server delivers at commit, once per transaction, and never for one rolled back. No row
is written, so writers take no lock they did not take before. SQLite needs nothing: it
counts commits itself (``PRAGMA data_version``).

Revision ID: 0016
Revises: 0015
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

CHANNEL = "suanli_changes"
TABLES = ["instances", "jobs", "waiting_reasons", "billing_price_versions", "billing_subscriptions"]


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"CREATE FUNCTION suanli_notify_change() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN PERFORM pg_notify('{CHANNEL}', ''); RETURN NULL; END $$"
    )
    for table in TABLES:
        op.execute(
            f"CREATE TRIGGER suanli_change_notice AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION suanli_notify_change()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in reversed(TABLES):
        op.execute(f"DROP TRIGGER suanli_change_notice ON {table}")
    op.execute("DROP FUNCTION suanli_notify_change()")
