"""Pipelines and sweeps: job dependencies and job groups.

- ``job_dependencies``: one row per edge, ``job_id`` waits for ``depends_on_id``;
  ``after`` is ``succeeded`` (run only if it succeeded, else be cancelled) or
  ``finished`` (run after any end). The primary key serves "the edges of this job",
  ``ix_job_deps_parent`` "the jobs waiting on this one": the scheduling gate is one
  indexed query.
- ``jobs.group_name``: the pipeline or sweep a job was submitted in ("" for none).
- ``ix_jobs_state``: the gate and the waiting-work read filter jobs by state.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_dependencies",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("depends_on_id", sa.Integer(), nullable=False),
        sa.Column("after", sa.String(length=20), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"]),
        sa.ForeignKeyConstraint(["depends_on_id"], ["jobs.id"]),
        sa.PrimaryKeyConstraint("job_id", "depends_on_id"),
        sa.CheckConstraint("after IN ('succeeded', 'finished')", name="ck_job_deps_after"),
        sa.CheckConstraint("job_id <> depends_on_id", name="ck_job_deps_self"),
    )
    op.create_index("ix_job_deps_parent", "job_dependencies", ["depends_on_id"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("group_name", sa.String(length=120), nullable=False, server_default=""))
    op.create_index("ix_jobs_state", "jobs", ["state"])


def downgrade() -> None:
    op.drop_index("ix_jobs_state", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("group_name")
    op.drop_index("ix_job_deps_parent", table_name="job_dependencies")
    op.drop_table("job_dependencies")
