"""State the API's processes share with the control loop's process (``suanli server``
runs them apart: ``api.supervisor``).

- ``loop_status``: the control loop's counters, one row (``/healthz``, ``/metrics``);
- ``waiting_reasons``: why each waiting instance or job waits, and since when;
- ``auth_failures``: failed token and sign-in attempts, so a throttle's limit holds
  across every API worker.

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "loop_status",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=40), nullable=False),
        sa.Column("ticks", sa.BigInteger(), nullable=False),
        sa.Column("launched", sa.BigInteger(), nullable=False),
        sa.Column("conflicts", sa.BigInteger(), nullable=False),
        sa.Column("policy_errors", sa.BigInteger(), nullable=False),
        sa.Column("last_tick_s", sa.Float(), nullable=False),
        sa.Column("waiting", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "waiting_reasons",
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("code", sa.String(length=30), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("kind", "workload_id"),
    )
    op.create_table(
        "auth_failures",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("scope", sa.String(length=20), nullable=False),
        sa.Column("key", sa.String(length=300), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_auth_failures_key", "auth_failures", ["scope", "key", "at"])


def downgrade() -> None:
    op.drop_index("ix_auth_failures_key", table_name="auth_failures")
    op.drop_table("auth_failures")
    op.drop_table("waiting_reasons")
    op.drop_table("loop_status")
