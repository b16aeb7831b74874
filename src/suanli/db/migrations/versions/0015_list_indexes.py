"""Indexes the paged listings read by (``api.paging``, ``db.keyset``).

A renter's page of instances or jobs is ``WHERE tenant_id = ? AND id > ? ORDER BY id
LIMIT n``: with ``(tenant_id, id)`` it reads the page and stops, without it it scans
every tenant's rows. A listing's allocations are looked up by the workloads of the page
(``instance_id``, ``job_id``); a user's tokens and a tenant's users likewise.

Revision ID: 0015
Revises: 0014
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

INDEXES = [
    ("ix_instances_tenant", "instances", ["tenant_id", "id"]),
    ("ix_jobs_tenant", "jobs", ["tenant_id", "id"]),
    ("ix_alloc_instance", "allocations", ["instance_id"]),
    ("ix_alloc_job", "allocations", ["job_id"]),
    ("ix_api_tokens_user", "api_tokens", ["user_id", "id"]),
    ("ix_users_tenant", "users", ["tenant_id", "id"]),
]


def upgrade() -> None:
    for name, table, columns in INDEXES:
        op.create_index(name, table, columns)


def downgrade() -> None:
    for name, table, _ in reversed(INDEXES):
        op.drop_index(name, table_name=table)
