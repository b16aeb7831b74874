"""Keyset pagination: a page is "the next ``limit`` rows after this (sort key, id)".

An offset pager skips or repeats rows when rows are inserted or deleted between two
pages; a keyset pager does not, as long as the key never changes for a row: the next
page starts strictly after the last row seen, whatever happened before it. So every
paged list here sorts on immutable columns (the id, a creation time, a name) with the
row's id last, which makes the key unique.

The page fetches ``limit + 1`` rows: the extra one says whether there is a next page
without a second query (a ``COUNT`` would scan everything the filter matches).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, and_, or_
from sqlalchemy.orm import QueryableAttribute

#: JSON values a key may hold (it travels in a cursor)
KeyValue = int | str
#: a sort column: a mapped attribute (``Instance.id``) or a column expression
Column = QueryableAttribute[Any] | ColumnElement[Any]
T = TypeVar("T")
S = TypeVar("S", bound=Select)  # any statement, whatever it selects


@dataclass(frozen=True)
class Page:
    """Which page to read: at most ``limit`` rows strictly after ``after`` (None: the first)."""

    limit: int
    after: tuple[KeyValue, ...] | None = None


def after(columns: Sequence[Column], key: Sequence[KeyValue], descending: bool = False) -> ColumnElement[bool]:
    """Rows whose ``columns`` come strictly after ``key`` in (lexicographic) sort order.
    Written as ``a > x OR (a = x AND b > y)`` rather than a row-value comparison: the
    same SQL on SQLite and PostgreSQL, and both use an index on the leading column."""
    if len(columns) != len(key):
        raise ValueError("a key has one value per sort column")
    clauses = []
    for i, (col, value) in enumerate(zip(columns, key)):
        beyond = col < value if descending else col > value
        clauses.append(and_(*(c == v for c, v in zip(columns[:i], key[:i])), beyond))
    return or_(*clauses)


def select_page(stmt: S, columns: Sequence[Column], page: Page | None, descending: bool = False) -> S:
    """``stmt`` ordered by ``columns`` (the last one the id), from ``page.after``, one row
    more than ``page.limit``; ``page`` None: every row, in that order."""
    order = [c.desc() if descending else c.asc() for c in columns]
    stmt = stmt.order_by(None).order_by(*order)
    if page is None:
        return stmt
    if page.after is not None:
        stmt = stmt.where(after(columns, page.after, descending))
    return stmt.limit(page.limit + 1)


def split(rows: Sequence[T], page: Page | None) -> tuple[list[T], bool]:
    """The page's rows and whether more follow (the ``limit + 1``-th row was found)."""
    if page is None or len(rows) <= page.limit:
        return list(rows), False
    return list(rows[: page.limit]), True
