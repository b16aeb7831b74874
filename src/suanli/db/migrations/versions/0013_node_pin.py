"""Jobs pinned to nodes, and node verification runs as pinned jobs (``suanli nodes verify NAME``).

- ``jobs.pin_nodes`` (JSON list, empty: any node) and ``jobs.ignore_cordon`` (it may land
  on a cordoned pinned node): set only by the control plane for an operator's node
  verification (``control.verify_jobs``).
- ``node_verify_runs``: one row per verification run as a job: the node, the job, who
  asked, whether a pass uncordons, and its outcome (the ``node_verifications`` row it
  recorded, or why nothing was recorded).

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("pin_nodes", sa.JSON(), nullable=False, server_default="[]"))
        batch.add_column(sa.Column("ignore_cordon", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "node_verify_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("actor", sa.String(length=100), nullable=False),
        sa.Column("uncordon", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("verification_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("state IN ('waiting', 'recorded', 'failed')", name="ck_node_verify_runs_state"),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"]),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"]),
        sa.ForeignKeyConstraint(["verification_id"], ["node_verifications.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_node_verify_runs_state", "node_verify_runs", ["state"])


def downgrade() -> None:
    op.drop_index("ix_node_verify_runs_state", table_name="node_verify_runs")
    op.drop_table("node_verify_runs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("ignore_cordon")
        batch.drop_column("pin_nodes")
