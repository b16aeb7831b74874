"""The price book's versions as stored: which version is in force when.

Every price change writes a new version (``store.set_price``), so the table only grows;
a request reads the one or two versions it prices with (``current_book``,
``versions_in_force``), and only a rating run reads every version (``versions``). On a
server the process keeps every version while none is added (``db.kept``), and a request
reads none.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from suanli.billing.pricebook import PriceBook, default_book, parse
from suanli.billing.tables import PriceVersion
from suanli.clock import SYSTEM
from suanli.db.kept import kept_whole
from suanli.db.session import read_only


def ensure_book(s: Session) -> None:
    """Version 1 is the bundled seed book, effective from the epoch."""
    if s.scalar(select(func.count()).select_from(PriceVersion)) == 0:
        s.add(
            PriceVersion(
                effective_ms=0,
                author="default",
                note="seed prices (suanli/billing/data/pricebook.yaml)",
                book=default_book().to_dict(),
            )
        )
        s.flush()


def versions(s: Session) -> list[tuple[int, int, PriceBook]]:
    """(id, effective_ms, book), oldest first. Kept by the process while the catalog is
    unchanged (``db.kept``); else read once per transaction: one request asks for the
    book several times (its costs, the spot market, the rater's estimate), and each read
    loads every version; ``set_price`` forgets the transaction's copy."""
    known = _known(s)
    if known is not None:
        return list(known)
    got = _read(s)
    s.info[_VERSIONS] = (s.get_transaction(), got)  # a later transaction of this session reads again
    return list(got)


def _known(s: Session) -> Sequence[tuple[int, int, PriceBook]] | None:
    """Every version, without a read: kept by the process, or read before in this
    transaction; None when neither."""
    every = kept_whole(s, "price_versions", lambda s: tuple(_read(s)))
    if every is not None:
        return every
    memo = s.info.get(_VERSIONS)
    return memo[1] if memo is not None and memo[0] is s.get_transaction() else None


def _read(s: Session) -> list[tuple[int, int, PriceBook]]:
    rows = list(s.execute(select(PriceVersion).order_by(PriceVersion.effective_ms, PriceVersion.id)).scalars())
    if not rows and read_only(s):  # as ``ensure_book`` would write it, for this read only
        return [(1, 0, default_book())]
    if not rows:  # the seed book, written on the first read (bootstrap writes it first on a server)
        ensure_book(s)
        rows = list(s.execute(select(PriceVersion).order_by(PriceVersion.effective_ms, PriceVersion.id)).scalars())
    return [(r.id, r.effective_ms, _book(r.id, r.book)) for r in rows]


#: the key of a session's price versions in ``Session.info``
_VERSIONS = "suanli_price_versions"
#: the key of a session's version in force, and the instants it is in force for
_IN_FORCE = "suanli_price_in_force"


_BOOKS: dict[str, PriceBook] = {}


def _book(version_id: int, data: dict) -> PriceBook:
    """Parsed books cached by content (version ids repeat across databases)."""
    key = json.dumps(data, sort_keys=True)
    if key not in _BOOKS:
        if len(_BOOKS) > 256:
            _BOOKS.clear()
        _BOOKS[key] = parse(data)
    return _BOOKS[key]


def current_book(s: Session, at_ms: int | None = None) -> tuple[int, PriceBook]:
    """The version in force at ``at_ms`` (the first, if none was yet). Reads that version
    alone, not every version: the book grows by one with every price change, and a create
    asks for the book several times (issue 18, session 38)."""
    at = SYSTEM.now_ms() if at_ms is None else at_ms
    books = _known(s)
    if books is not None:
        live = [(vid, b) for vid, eff, b in books if eff <= at]
        return live[-1] if live else books[0][::2]
    kept = s.info.get(_IN_FORCE)
    if kept is not None and kept[0] is s.get_transaction() and kept[1] <= at < kept[2]:
        return kept[3]
    later = select(func.min(PriceVersion.effective_ms)).where(PriceVersion.effective_ms > at).scalar_subquery()
    row = s.execute(
        select(PriceVersion.id, PriceVersion.effective_ms, PriceVersion.book, later)
        .where(PriceVersion.effective_ms <= at)
        .order_by(PriceVersion.effective_ms.desc(), PriceVersion.id.desc())
        .limit(1)
    ).first()
    if row is None:  # nothing in force yet (or no book: versions() writes the seed)
        return versions(s)[0][::2]
    vid, eff, data, until = row
    found = (vid, _book(vid, data))
    # the same answer for any instant from this version's start to the next one's
    s.info[_IN_FORCE] = (s.get_transaction(), eff, until if until is not None else 2**63, found)
    return found


def versions_in_force(s: Session, since_ms: int, at_ms: int) -> list[tuple[int, int, PriceBook]]:
    """(id, effective_ms, book) of the versions some record from ``since_ms`` to ``at_ms``
    may be priced with (``in_force`` of ``versions``), reading only those and the next
    (the version in force at ``at_ms`` is kept for ``current_book``)."""
    books = _known(s)
    if books is not None:
        return in_force(list(books), since_ms, at_ms)
    kept = s.info.get(_IN_FORCE)
    if kept is not None and kept[0] is s.get_transaction() and kept[1] <= since_ms and at_ms < kept[2]:
        return [(kept[3][0], kept[1], kept[3][1])]  # one version in force throughout
    first = (
        select(PriceVersion.id)
        .where(PriceVersion.effective_ms <= since_ms)
        .order_by(PriceVersion.effective_ms.desc(), PriceVersion.id.desc())
        .limit(1)
        .scalar_subquery()
    )
    rows = s.execute(
        select(PriceVersion.id, PriceVersion.effective_ms, PriceVersion.book)
        .where((PriceVersion.id == first) | (PriceVersion.effective_ms > since_ms))
        .order_by(PriceVersion.effective_ms, PriceVersion.id)
    ).all()
    if not rows or rows[0][1] > since_ms:  # none in force at ``since_ms`` yet: the first is
        return in_force(versions(s), since_ms, at_ms)
    found = [(vid, eff, _book(vid, data)) for vid, eff, data in rows if eff <= at_ms]
    later = [eff for _, eff, _ in rows if eff > at_ms]
    s.info[_IN_FORCE] = (s.get_transaction(), found[-1][1], later[0] if later else 2**63, found[-1][::2])
    return found


def in_force(books: list[tuple[int, int, PriceBook]], since_ms: int, at_ms: int) -> list[tuple[int, int, PriceBook]]:
    """Of the versions ``books`` (oldest first, as ``versions`` gives them), those some
    record from ``since_ms`` to ``at_ms`` may be priced with: the one in force at
    ``since_ms`` (the first, if none was yet: ``rater.version_index``) and those that took
    effect after it, up to ``at_ms``. Pure."""
    first = max((i for i, (_, eff, _) in enumerate(books) if eff <= since_ms), default=0)
    return [v for i, v in enumerate(books) if i == first or (i > first and v[1] <= at_ms)]


def forget(s: Session) -> None:
    """Drop what this session kept of the versions (a version was just written)."""
    s.info.pop(_VERSIONS, None)
    s.info.pop(_IN_FORCE, None)
