"""Metrics, idle auto-stop and alerts (issue 15).

- ``workload_metrics``: raw samples and five-minute buckets of each workload's CPU,
  memory, GPU utilisation, GPU memory and power (GPU columns NULL: not measured).
- ``instances.autostop_s`` / ``instances.active_at``, ``tenants.autostop_s``: the idle
  auto-stop window and the last activity seen.
- ``tenant_webhooks``, ``alerts``, ``alert_cursor``: alerts and their webhook deliveries.

Revision ID: 0011
Revises: 0009 (re-point to 0010 when the job-dependencies branch is merged)
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workload_metrics",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("resolution_s", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("samples", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("cpu_percent", sa.Float(), nullable=False),
        sa.Column("memory_mib", sa.Float(), nullable=False),
        sa.Column("gpu_util_percent", sa.Float(), nullable=True),
        sa.Column("gpu_memory_mib", sa.Float(), nullable=True),
        sa.Column("power_w", sa.Float(), nullable=True),
        sa.Column("sessions", sa.Integer(), nullable=True),
        sa.Column("gpu_note", sa.String(100), nullable=False, server_default=""),
        sa.Column("gpus", sa.JSON(), nullable=False, server_default="[]"),
    )
    op.create_index("ix_workload_metrics_object", "workload_metrics", ["kind", "workload_id", "ts"])
    op.create_index("ix_workload_metrics_resolution", "workload_metrics", ["resolution_s", "ts"])
    with op.batch_alter_table("instances") as batch:
        batch.add_column(sa.Column("autostop_s", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("active_at", sa.Float(), nullable=True))
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("autostop_s", sa.Integer(), nullable=True))
    op.create_table(
        "tenant_webhooks",
        sa.Column("tenant_id", sa.Integer(), sa.ForeignKey("tenants.id"), primary_key=True),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(30), nullable=False),
        sa.Column("object", sa.String(100), nullable=False, server_default=""),
        sa.Column("message", sa.Text(), nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivery", sa.String(20), nullable=False, server_default="pending"),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("next_attempt_at", sa.Float(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=False, server_default=""),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_alerts_tenant", "alerts", ["tenant_id", "id"])
    op.create_index("ix_alerts_delivery", "alerts", ["delivery"])
    op.create_table(
        "alert_cursor",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("last_event_id", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("last_notice_id", sa.BigInteger(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table("alert_cursor")
    op.drop_index("ix_alerts_delivery", "alerts")
    op.drop_index("ix_alerts_tenant", "alerts")
    op.drop_table("alerts")
    op.drop_table("tenant_webhooks")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("autostop_s")
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("active_at")
        batch.drop_column("autostop_s")
    op.drop_index("ix_workload_metrics_resolution", "workload_metrics")
    op.drop_index("ix_workload_metrics_object", "workload_metrics")
    op.drop_table("workload_metrics")
