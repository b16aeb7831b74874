"""A page of a renter's instances or jobs as one statement reads it (``db.stamps``):
every column of its rows and their waiting reasons. The plain values are the page's stamp
(``api.page_cache`` keeps an answer while they read the same); when they changed, the
page is computed from the same read, not from a second one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import Select
from sqlalchemy.orm import DeclarativeBase, Session

from suanli.control.waiting import Reason
from suanli.db import stamps

W = TypeVar("W", bound=DeclarativeBase)


@dataclass(frozen=True)
class Listing(Generic[W]):
    #: every value read, as plain tuples: equal stamps, the same rows with the same values
    stamp: tuple
    #: the rows as objects of no session (``stamps.objects``), one more than the page's
    #: size when more follow (``db.keyset``)
    rows: list[W]
    #: why the rows the loop left waiting wait, and since when, by row id
    waits: dict[int, tuple[Reason, datetime | None]]


def read_listing(s: Session, model: type[W], q: Select[Any]) -> Listing[W]:
    """``q``: ``stamps.every_column(model, ...)`` with the page's ``WHERE``, order and
    limit; read on the session's connection, as plain rows (``Session.execute`` adds the
    ORM's handling, a third of the read's cost)."""
    rows = list(s.connection().execute(q))
    waits = {i: (Reason(code, detail), since) for i, (code, detail, since) in stamps.waits(rows).items()}
    return Listing(tuple(map(tuple, rows)), stamps.objects(model, rows), waits)
