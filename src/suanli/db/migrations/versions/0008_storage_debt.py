"""A stopped disk's storage charge accrues as debt only within a per-tenant limit.

``billing_terms.storage_debt_limit_micros`` is the limit (default ¥10);
``billing_usage.waived`` is the part of a storage record past it: rated, not charged.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("billing_terms") as batch:
        batch.add_column(sa.Column("storage_debt_limit_micros", sa.BigInteger(), nullable=False, server_default="10000000"))
        batch.create_check_constraint("ck_billing_terms_storage_debt", "storage_debt_limit_micros >= 0")
    with op.batch_alter_table("billing_usage") as batch:
        batch.add_column(sa.Column("waived", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("billing_usage") as batch:
        batch.drop_column("waived")
    with op.batch_alter_table("billing_terms") as batch:
        batch.drop_constraint("ck_billing_terms_storage_debt", type_="check")
        batch.drop_column("storage_debt_limit_micros")
