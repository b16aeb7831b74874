"""Paged lists: ``?limit=`` and an opaque ``?cursor=``; the next page's cursor comes back
in the ``X-Next-Cursor`` header (and as a ``Link: <...>; rel="next"`` URL).

The body stays a JSON list, so a client written before paging still reads a list (the
first page); ``suanli.client`` and the console follow the cursor to the end. The last
page carries no ``X-Next-Cursor``.

A cursor is the last row's sort key (``db.keyset``), named with the list it belongs to,
as base64url JSON. It is not a capability: every page runs the list's own filters (the
caller's tenant, its role) again, so a forged cursor only moves where a list starts,
never what it may show. A cursor that is not one of this list's answers 422 and changes
nothing.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import Query, Request, Response

from suanli.db.keyset import KeyValue, Page, split
from suanli.errors import Invalid

T = TypeVar("T")

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
#: a cursor holds a list's name and a short key: anything longer is not one of ours
MAX_CURSOR = 600
NEXT_HEADER = "X-Next-Cursor"

#: the OpenAPI ``responses`` entry of a paged list: its headers
PAGED: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "one page, in the list's order; the next page's cursor in X-Next-Cursor",
        "headers": {
            NEXT_HEADER: {
                "description": "pass as ?cursor= to read the next page; absent on the last page",
                "schema": {"type": "string"},
            },
            "Link": {"description": '<URL of the next page>; rel="next" (absent on the last page)', "schema": {"type": "string"}},
        },
    }
}


@dataclass(frozen=True)
class Paging:
    """What the caller asked: how many rows, from where (a cursor not yet read)."""

    limit: int
    cursor: str | None

    def page(self, name: str, types: tuple[type, ...]) -> Page:
        """The page this asks of list ``name``, whose key holds values of ``types``."""
        if self.cursor is None:
            return Page(self.limit)
        return Page(self.limit, decode(self.cursor, name, types))


async def paging(
    limit: int = Query(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description=f"rows per page (1..{MAX_LIMIT})"),
    cursor: str | None = Query(
        None,
        min_length=1,
        max_length=MAX_CURSOR,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="where to start: the X-Next-Cursor of the previous page (opaque)",
    ),
) -> Paging:
    """The ``limit`` and ``cursor`` query parameters of every paged list."""
    return Paging(limit, cursor)


def encode(name: str, key: Sequence[KeyValue]) -> str:
    raw = json.dumps({"l": name, "k": list(key)}, separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode(cursor: str, name: str, types: tuple[type, ...]) -> tuple[KeyValue, ...]:
    """The key in ``cursor``, if it is a cursor of list ``name`` with values of ``types``."""
    try:
        doc = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError):
        raise Invalid("cursor: not a cursor this server gave (pass X-Next-Cursor as it came)") from None
    if not isinstance(doc, dict) or doc.get("l") != name:
        raise Invalid(f"cursor: not a cursor of this list ({name}); pass the X-Next-Cursor this list gave")
    key = doc.get("k")
    if (
        not isinstance(key, list)
        or len(key) != len(types)
        or not all(type(v) is t for v, t in zip(key, types))  # bool is not an int here
        or any(isinstance(v, int) and not -(2**63) <= v < 2**63 for v in key)
        or any(isinstance(v, str) and "\x00" in v for v in key)
    ):
        raise Invalid("cursor: its key is damaged; pass the X-Next-Cursor this list gave")
    return tuple(key)


def respond(
    request: Request,
    response: Response,
    name: str,
    rows: Sequence[T],
    page: Page,
    key: Callable[[T], Sequence[KeyValue]],
) -> list[T]:
    """The page's rows (``rows`` is what ``db.keyset.select_page`` fetched, one too many
    when more follow); sets the next page's cursor headers when more follow."""
    got, more = split(rows, page)
    if more:
        cursor = encode(name, key(got[-1]))
        response.headers[NEXT_HEADER] = cursor
        response.headers["Link"] = f'<{request.url.include_query_params(cursor=cursor)}>; rel="next"'
    return got
