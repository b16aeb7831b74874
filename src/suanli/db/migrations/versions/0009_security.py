"""Security: sealed workload secrets, the audit log, token scopes and expiry, sign-in.

- ``instances.secrets`` / ``jobs.secrets``: name -> AES-256-GCM ciphertext (``control.secrets``);
  the key lives outside the database.
- ``audit_log``: append-only, hash-chained records of who did what; ``audit_head`` holds
  the chain's tip, one row locked by every append so two writers never fork the chain.
- ``api_tokens``: a name, an expiry, scopes, an optional tenant, when it was last used and
  revoked, and its kind (``api`` or a console ``session``).
- ``users``: disabled, a password hash (argon2) and a sealed TOTP secret; ``tenants.require_2fa``.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.add_column(sa.Column("secrets", sa.JSON(), nullable=False, server_default="{}"))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("secrets", sa.JSON(), nullable=False, server_default="{}"))
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("require_2fa", sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("disabled", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("password_hash", sa.Text(), nullable=True))
        batch.add_column(sa.Column("totp_secret", sa.Text(), nullable=True))
        batch.add_column(sa.Column("totp_enabled", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("totp_last_step", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("name", sa.String(length=100), nullable=False, server_default=""))
        batch.add_column(sa.Column("kind", sa.String(length=20), nullable=False, server_default="api"))
        batch.add_column(sa.Column("scopes", sa.JSON(), nullable=False, server_default="[]"))
        batch.add_column(sa.Column("tenant_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_foreign_key("fk_api_tokens_tenant", "tenants", ["tenant_id"], ["id"])
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor_id", sa.Integer(), nullable=True),
        sa.Column("actor", sa.String(length=100), nullable=False),
        sa.Column("actor_role", sa.String(length=20), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=True),
        sa.Column("action", sa.String(length=100), nullable=False),
        sa.Column("object", sa.String(length=200), nullable=False),
        sa.Column("source", sa.String(length=100), nullable=False),
        sa.Column("result", sa.String(length=40), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"])
    op.create_index("ix_audit_log_tenant", "audit_log", ["tenant_id", "id"])
    op.create_table(
        "audit_head",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("last_id", sa.BigInteger(), nullable=False),
        sa.Column("last_hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.execute("INSERT INTO audit_head (id, last_id, last_hash) VALUES (1, 0, '" + "0" * 64 + "')")


def downgrade() -> None:
    op.drop_table("audit_head")
    op.drop_index("ix_audit_log_tenant", table_name="audit_log")
    op.drop_index("ix_audit_log_at", table_name="audit_log")
    op.drop_table("audit_log")
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_constraint("fk_api_tokens_tenant", type_="foreignkey")
        for col in ("revoked_at", "last_used_at", "expires_at", "tenant_id", "scopes", "kind", "name"):
            batch.drop_column(col)
    with op.batch_alter_table("users") as batch:
        for col in ("totp_last_step", "totp_enabled", "totp_secret", "password_hash", "disabled"):
            batch.drop_column(col)
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("require_2fa")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("secrets")
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("secrets")
