"""Verification results per node, with history (``suanli verify``, ``control.verification``).

- ``node_verifications``: one row per result a node's ``suanli verify`` reported: when,
  who recorded it, passed / failed / unmeasured, the lowest TFLOPS, memory and bandwidth
  ratios of its GPUs against the catalog, the reasons it failed, and the whole report.

Revision ID: 0012
Revises: 0009 (written beside 0010 and 0011 on other branches: re-point at 0011 when merged)
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_verifications",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("measured_at", sa.String(length=40), nullable=False),
        sa.Column("actor", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("device", sa.String(length=10), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("tflops_ratio", sa.Float(), nullable=True),
        sa.Column("memory_ratio", sa.Float(), nullable=True),
        sa.Column("bandwidth_ratio", sa.Float(), nullable=True),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.CheckConstraint("status IN ('passed', 'failed', 'unmeasured')", name="ck_node_verifications_status"),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_node_verifications_node", "node_verifications", ["node_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_node_verifications_node", table_name="node_verifications")
    op.drop_table("node_verifications")
