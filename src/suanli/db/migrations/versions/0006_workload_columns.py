"""jobs.max_price_micros (the bid had lived in the spec JSON) and the spot notice in
columns of its own on instances and jobs (it had lived in the backend handles JSON)

Revision ID: 0006
Revises: 0005
"""

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

NOTICE: list[tuple[str, sa.types.TypeEngine]] = [
    ("notice_deadline", sa.Float()),
    ("notice_at", sa.Float()),
    ("notice_s", sa.Float()),
    ("notice_for", sa.String(100)),
    ("notice_why", sa.Text()),
]


def _micros(text: object) -> int | None:
    """``billing.money.to_micros`` as of this revision (a migration must not change
    with the code it migrates)."""
    try:
        return int((Decimal(str(text)) * 1_000_000).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    except (InvalidOperation, ValueError):
        return None


def upgrade() -> None:
    for table in ("instances", "jobs"):
        with op.batch_alter_table(table) as batch:
            for name, type_ in NOTICE:
                batch.add_column(sa.Column(name, type_, nullable=True))
            batch.add_column(sa.Column("notice_ended_early", sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("max_price_micros", sa.BigInteger(), nullable=True))
    conn = op.get_bind()
    jobs = sa.table("jobs", sa.column("id"), sa.column("spec", sa.JSON()), sa.column("max_price_micros"))
    for row in conn.execute(sa.select(jobs.c.id, jobs.c.spec)):
        price = ((row.spec or {}).get("resources") or {}).get("max_price")
        if price is not None:
            conn.execute(jobs.update().where(jobs.c.id == row.id).values(max_price_micros=_micros(price)))
    # notices given before the upgrade move out of the handles
    for table in ("instances", "jobs"):
        t = sa.table(
            table,
            sa.column("id"),
            sa.column("handles", sa.JSON()),
            *(sa.column(n) for n, _ in NOTICE),
            sa.column("notice_ended_early"),
        )
        for row in conn.execute(sa.select(t.c.id, t.c.handles).where(t.c.handles.is_not(None))):
            notice = next(
                ((h.get("data") or {}).get("notice") for h in row.handles or [] if (h.get("data") or {}).get("notice")), None
            )
            if not notice:
                continue
            handles = [{**h, "data": {k: v for k, v in (h.get("data") or {}).items() if k != "notice"}} for h in row.handles]
            conn.execute(
                t.update()
                .where(t.c.id == row.id)
                .values(
                    handles=handles,
                    notice_deadline=notice["deadline"],
                    notice_at=notice.get("at"),
                    notice_s=notice.get("notice_s"),
                    notice_for=notice.get("for"),
                    notice_why=notice.get("why"),
                    notice_ended_early=bool(notice.get("ended_early")),
                )
            )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("max_price_micros")
    for table in ("jobs", "instances"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("notice_ended_early")
            for name, _ in reversed(NOTICE):
                batch.drop_column(name)
