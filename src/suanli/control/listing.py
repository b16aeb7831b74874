"""A page of a renter's instances or jobs as one statement reads it (``db.stamps``):
every column of its rows and their waiting reasons. The plain values are the page's stamp
(``api.page_cache`` keeps an answer while they read the same); when they changed, the
page is computed from the same read, not from a second one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any, Generic, TypeVar

from sqlalchemy import Row, Select
from sqlalchemy.orm import DeclarativeBase, Session

from suanli.control.waiting import Reason
from suanli.db import stamps
from suanli.errors import NotFound

W = TypeVar("W", bound=DeclarativeBase)


@dataclass(frozen=True)
class Listing(Generic[W]):
    model: type[W]
    read: list[Row[Any]]

    @cached_property
    def stamp(self) -> tuple:
        """Every value read, as plain tuples: equal stamps, the same rows with the same values."""
        return tuple(map(tuple, self.read))

    @cached_property
    def rows(self) -> list[W]:
        """The rows as objects of no session (``stamps.objects``), one more than the
        page's size when more follow (``db.keyset``); built only for a page computed,
        not for one whose stamp says it is kept."""
        return stamps.objects(self.model, self.read)

    @cached_property
    def waits(self) -> dict[int, tuple[Reason, datetime | None]]:
        """Why the rows the loop left waiting wait, and since when, by row id."""
        return {i: (Reason(code, detail), since) for i, (code, detail, since) in stamps.waits(self.read).items()}


def read_listing(s: Session, model: type[W], q: Select[Any]) -> Listing[W]:
    """``q``: ``stamps.every_column(model, ...)`` with the page's ``WHERE``, order and
    limit; read on the session's connection, as plain rows (``Session.execute`` adds the
    ORM's handling, a third of the read's cost)."""
    return Listing(model, list(s.connection().execute(q)))


def read_one(s: Session, model: type[W], q: Select[Any], missing: str) -> Listing[W]:
    """``read_listing`` of one row (``q`` selects it by id and owner); ``NotFound`` with
    the message ``missing`` when there is none to show."""
    listed = read_listing(s, model, q)
    if not listed.read:
        raise NotFound(missing)
    return listed
