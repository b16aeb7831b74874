"""A statement that reads rows as plain values, to tell cheaply whether they changed
(``api.page_cache``: a kept page is answered while its rows read the same).

Built once per table: coercing some 40 columns into a new ``select`` cost more than the
query it serves, and JSON columns are read as their text, not decoded.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Select, Text, and_, cast, select
from sqlalchemy.orm import DeclarativeBase

from suanli.db.models import WaitingReason


def every_column(model: type[DeclarativeBase], kind: str) -> Select[Any]:
    """``SELECT`` of every column of ``model``'s table, JSON ones as text, and of each
    row's waiting reason (``kind``: ``instance`` or ``job``; the loop writes it apart from
    the row, and a page shows it); add the ``WHERE``, order and limit of the rows."""
    table = model.__table__
    columns = [cast(c, Text) if isinstance(c.type, JSON) else c for c in table.columns]
    waits = and_(WaitingReason.kind == kind, WaitingReason.workload_id == table.c.id)
    return (
        select(*columns, WaitingReason.code, WaitingReason.detail, WaitingReason.since)
        .select_from(table)
        .outerjoin(WaitingReason, waits)
    )
