"""``loop_status``: the reclaim phases' counters (notices given, work evicted when its
notice ran out, shares noticed to move, work failed over from a down node), so the API
processes export them (``/metrics``) as they do the loop's other counters.

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

COLUMNS = ("notices", "reclaimed", "migrations", "failed_over")


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("loop_status", sa.Column(name, sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("loop_status") as batch:
        for name in COLUMNS:
            batch.drop_column(name)
