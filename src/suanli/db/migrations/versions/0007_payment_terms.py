"""Payment terms per tenant (prepaid by default), the operator's budget floor and a
record of who changed a budget.

Tenants that exist when this runs keep the terms they had in effect: post-paid (the
platform enforced no balance before), written explicitly so an operator sees them.

Revision ID: 0007
Revises: 0006
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    terms = op.create_table(
        "billing_terms",
        sa.Column("tenant_id", sa.Integer(), sa.ForeignKey("tenants.id"), primary_key=True),
        sa.Column("terms", sa.String(10), nullable=False),
        sa.Column("credit_limit_micros", sa.BigInteger(), nullable=False),
        sa.Column("grace_s", sa.Integer(), nullable=False),
        sa.Column("low_balance_micros", sa.BigInteger(), nullable=True),
        sa.Column("low_alerted", sa.Boolean(), nullable=False),
        sa.Column("set_by", sa.String(100), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("terms IN ('prepaid', 'credit', 'postpaid')", name="ck_billing_terms_terms"),
        sa.CheckConstraint("credit_limit_micros >= 0", name="ck_billing_terms_credit"),
    )
    op.create_table(
        "billing_budget_changes",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("user_name", sa.String(100), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("before", sa.JSON(), nullable=True),
        sa.Column("after", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_billing_budget_changes_tenant", "billing_budget_changes", ["tenant_id"])
    with op.batch_alter_table("billing_budgets") as batch:
        batch.add_column(sa.Column("operator_floor", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("set_by", sa.String(100), nullable=False, server_default=""))
    conn = op.get_bind()
    now = datetime.now(UTC)
    for (tid,) in conn.execute(sa.text("SELECT id FROM tenants")):
        conn.execute(
            terms.insert().values(
                tenant_id=tid,
                terms="postpaid",
                credit_limit_micros=0,
                grace_s=300,
                low_balance_micros=None,
                low_alerted=False,
                set_by="migration 0007",
                updated_at=now,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("billing_budgets") as batch:
        batch.drop_column("set_by")
        batch.drop_column("operator_floor")
    op.drop_index("ix_billing_budget_changes_tenant", "billing_budget_changes")
    op.drop_table("billing_budget_changes")
    op.drop_table("billing_terms")
