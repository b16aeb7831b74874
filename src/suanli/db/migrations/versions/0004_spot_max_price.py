"""instances.max_price_micros, allocations.max_price_micros: spot bids (max_price)

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.add_column(sa.Column("max_price_micros", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("max_price_micros", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("max_price_micros")
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("max_price_micros")
