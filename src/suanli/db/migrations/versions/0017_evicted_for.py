"""``jobs.evicted_for``: the waiting work a job was evicted for (a spot reclaim or a
migration of its GPU share), so the next scheduling pass places it after that work.

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


# Plain ALTER TABLE, not a batch: on SQLite a batch may copy the table, which drops the
# triggers migration 0016 put on it.
def upgrade() -> None:
    op.add_column("jobs", sa.Column("evicted_for", sa.String(length=100), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "evicted_for")
