"""billing: price versions, usage records, double-entry ledger, grants, budgets,
subscriptions, transfers, rating watermark (suanli.billing.tables)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 17:36:42.946117
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "billing_entries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=160), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=True),
        sa.Column("memo", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key"),
    )
    op.create_table(
        "billing_notices",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("billing_notices", schema=None) as batch_op:
        batch_op.create_index("ix_billing_notices_tenant", ["tenant_id"], unique=False)

    op.create_table(
        "billing_price_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("effective_ms", sa.BigInteger(), nullable=False),
        sa.Column("author", sa.String(length=100), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("book", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "billing_state",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("watermark_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_run", sa.String(length=40), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "billing_usage",
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("source_id", sa.BigInteger(), nullable=False),
        sa.Column("period_ms", sa.BigInteger(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("workload_kind", sa.String(length=10), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sa.String(length=50), nullable=False),
        sa.Column("plan", sa.String(length=20), nullable=False),
        sa.Column("start_ms", sa.BigInteger(), nullable=False),
        sa.Column("end_ms", sa.BigInteger(), nullable=False),
        sa.Column("quantity", sa.BigInteger(), nullable=False),
        sa.Column("billed_seconds", sa.BigInteger(), nullable=False),
        sa.Column("unit_price", sa.BigInteger(), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("price_version", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.PrimaryKeyConstraint("kind", "source_id", "period_ms"),
    )
    with op.batch_alter_table("billing_usage", schema=None) as batch_op:
        batch_op.create_index("ix_billing_usage_tenant", ["tenant_id", "period_ms"], unique=False)

    op.create_table(
        "billing_budgets",
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("limit_micros", sa.BigInteger(), nullable=True),
        sa.Column("thresholds", sa.JSON(), nullable=False),
        sa.Column("hard_cap", sa.Boolean(), nullable=False),
        sa.Column("notice_s", sa.Integer(), nullable=False),
        sa.Column("period", sa.String(length=7), nullable=False),
        sa.Column("alerted", sa.JSON(), nullable=False),
        sa.Column("notice_since_ms", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
        ),
        sa.PrimaryKeyConstraint("tenant_id"),
    )
    op.create_table(
        "billing_grants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sa.String(length=50), nullable=True),
        sa.Column("max_gpu_milli", sa.Integer(), nullable=False),
        sa.Column("gpu_minutes", sa.Integer(), nullable=True),
        sa.Column("qos", sa.String(length=20), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "billing_postings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("entry_id", sa.Integer(), nullable=False),
        sa.Column("account", sa.String(length=60), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["entry_id"],
            ["billing_entries.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("billing_postings", schema=None) as batch_op:
        batch_op.create_index("ix_billing_postings_account", ["account"], unique=False)

    op.create_table(
        "billing_subscriptions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("plan", sa.String(length=20), nullable=False),
        sa.Column("gpu_model", sa.String(length=50), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("start_ms", sa.BigInteger(), nullable=False),
        sa.Column("end_ms", sa.BigInteger(), nullable=False),
        sa.Column("fee", sa.BigInteger(), nullable=False),
        sa.Column("cancelled_ms", sa.BigInteger(), nullable=True),
        sa.Column("refund", sa.BigInteger(), nullable=False),
        sa.Column("price_version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "billing_transfers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("ts_ms", sa.BigInteger(), nullable=False),
        sa.Column("gib_milli", sa.BigInteger(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("billing_transfers")
    op.drop_table("billing_subscriptions")
    with op.batch_alter_table("billing_postings", schema=None) as batch_op:
        batch_op.drop_index("ix_billing_postings_account")

    op.drop_table("billing_postings")
    op.drop_table("billing_grants")
    op.drop_table("billing_budgets")
    with op.batch_alter_table("billing_usage", schema=None) as batch_op:
        batch_op.drop_index("ix_billing_usage_tenant")

    op.drop_table("billing_usage")
    op.drop_table("billing_state")
    op.drop_table("billing_price_versions")
    with op.batch_alter_table("billing_notices", schema=None) as batch_op:
        batch_op.drop_index("ix_billing_notices_tenant")

    op.drop_table("billing_notices")
    op.drop_table("billing_entries")
