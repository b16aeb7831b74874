"""A statement that reads rows as plain values, to tell cheaply whether they changed
(``api.page_cache``: a kept page is answered while its rows read the same), and the rows
it read as objects, so that a page computed after its stamp changed reads them once.

Built once per table: coercing some 40 columns into a new ``select`` cost more than the
query it serves, and JSON columns are read as their text, not decoded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any, TypeVar
from typing import cast as cast_to

from sqlalchemy import JSON, Row, Select, Text, and_, cast, inspect, select
from sqlalchemy.orm import DeclarativeBase

from suanli.db.models import WaitingReason

M = TypeVar("M", bound=DeclarativeBase)


def every_column(model: type[DeclarativeBase], kind: str) -> Select[Any]:
    """``SELECT`` of every column of ``model``'s table, JSON ones as text, and of each
    row's waiting reason (``kind``: ``instance`` or ``job``; the loop writes it apart from
    the row, and a page shows it); add the ``WHERE``, order and limit of the rows."""
    table = model.__table__
    columns = [cast(c, Text).label(c.name) if isinstance(c.type, JSON) else c for c in table.columns]
    waits = and_(WaitingReason.kind == kind, WaitingReason.workload_id == table.c.id)
    return (
        select(
            *columns,
            WaitingReason.code.label("wait_code"),
            WaitingReason.detail.label("wait_detail"),
            WaitingReason.since.label("wait_since"),
        )
        .select_from(table)
        .outerjoin(WaitingReason, waits)
    )


def objects(model: type[M], rows: Sequence[Row[Any]]) -> list[M]:
    """``rows`` that ``every_column(model, ...)`` read, as ``model`` objects with the
    same values (JSON decoded) as a query would load: a page computed from its stamp's
    rows reads them once. They are built as the ORM's loading builds objects, a new
    instance whose attributes are filled in place (a twentieth of the constructor's
    cost), and belong to no session: read them, never change them."""
    manager, fields = inspect(model).class_manager, _fields(model)
    out: list[M] = []
    for row in rows:
        obj = cast_to(M, manager.new_instance())
        obj.__dict__.update({key: (_decoded(row[i]) if is_json else row[i]) for i, key, is_json in fields})
        out.append(obj)
    return out


@cache
def _fields(model: type[DeclarativeBase]) -> list[tuple[int, str, bool]]:
    """Each column's position in ``every_column``'s rows, attribute name and whether it is JSON."""
    mapper = inspect(model)
    return [(i, mapper.get_property_by_column(c).key, isinstance(c.type, JSON)) for i, c in enumerate(model.__table__.columns)]


def waits(rows: Sequence[Row[Any]]) -> dict[int, tuple[str, str, datetime | None]]:
    """The waiting reasons ``every_column`` read with the rows, by row id: code, detail
    and since, of the rows the loop left a reason for."""
    return {int(r.id): (r.wait_code, r.wait_detail, r.wait_since) for r in rows if r.wait_code is not None}


def _decoded(text: str | None) -> Any:
    return None if text is None else json.loads(text)
