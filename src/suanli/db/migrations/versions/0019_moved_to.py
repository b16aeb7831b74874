"""``jobs.moved_to``: where a migration's plan put a moved share (``[node, GPU index]``),
so its next placement goes there if that GPU still takes it, as the simulator applies
a plan (``control.migrate``, ``control.scheduling``).

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


# Plain ALTER TABLE, not a batch: on SQLite a batch may copy the table, which drops the
# triggers migration 0016 put on it.
def upgrade() -> None:
    op.add_column("jobs", sa.Column("moved_to", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "moved_to")
