"""A statement that reads rows as plain values, to tell cheaply whether they changed
(``api.page_cache``: a kept page is answered while its rows read the same).

Built once per table: coercing some 40 columns into a new ``select`` cost more than the
query it serves, and JSON columns are read as their text, not decoded.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Select, Text, cast, select
from sqlalchemy.orm import DeclarativeBase


def every_column(model: type[DeclarativeBase]) -> Select[Any]:
    """``SELECT`` of every column of ``model``'s table, JSON ones as text; add the
    ``WHERE``, order and limit of the rows to stamp."""
    table = model.__table__
    return select(*(cast(c, Text) if isinstance(c.type, JSON) else c for c in table.columns)).select_from(table)
