"""Paged lists (``api.paging``): every row once and in order, stable while rows come and
go between pages, bad cursors and limits refused, and a cursor never a way into another
tenant's rows. The app in-process on SQLite and PostgreSQL, the control loop off (it would
add events and move states between pages, which is not what these tests measure)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.control.control_helpers import Server, start_server


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[Server]:
    srv = start_server(tmp_path / "data", db_url, start_loop=False, runtime="process", allow_process_runtime=True)
    try:
        yield srv
    finally:
        srv.close()


def member(server: Server, tenant: str) -> str:
    """A member of a new prepaid tenant with money; its token."""
    server.post("/v1/tenants", {"name": tenant}, expect=201)
    server.post("/v1/billing/topups", {"tenant": tenant, "amount": "1000"}, expect=201)
    return server.post("/v1/users", {"name": f"{tenant}-renter", "role": "member", "tenant": tenant}, expect=201).json()["token"]


def create(server: Server, token: str | None = None) -> int:
    return server.post("/v1/instances", {"gpu_milli": 100, "disk_gib": 1}, expect=201, token=token).json()["id"]


def get(server: Server, path: str, token: str | None = None, **params: Any) -> Any:
    return server.http.get(path, params=params, headers={"Authorization": f"Bearer {token or server.token}"})


def pages(server: Server, path: str, limit: int, token: str | None = None, **params: Any) -> list[list[dict]]:
    """Every page of ``path``, following X-Next-Cursor."""
    out: list[list[dict]] = []
    cursor = None
    while True:
        r = get(server, path, token, limit=limit, **params, **({"cursor": cursor} if cursor else {}))
        assert r.status_code == 200, r.text
        out.append(r.json())
        cursor = r.headers.get("x-next-cursor")
        if cursor is None:
            assert "link" not in r.headers, r.headers
            return out
        assert r.headers["link"].endswith('>; rel="next"') and f"cursor={cursor}" in r.headers["link"], r.headers
        assert len(out) < 1000, "the pager never ends"


def test_pages_hold_every_instance_once_in_order(server: Server) -> None:
    ids = [create(server) for _ in range(7)]
    got = pages(server, "/v1/instances", 3)
    assert [[r["id"] for r in p] for p in got] == [ids[:3], ids[3:6], ids[6:]]
    # a limit that divides the count: the last full page says there is none after it
    assert [[r["id"] for r in p] for p in pages(server, "/v1/instances", 7)] == [ids]


def test_rows_inserted_and_deleted_between_pages_cause_no_duplicate_or_skip(server: Server) -> None:
    ids = [create(server) for _ in range(6)]
    first = get(server, "/v1/instances", limit=2)
    seen = [r["id"] for r in first.json()]
    cursor = first.headers["x-next-cursor"]
    # between pages: new rows arrive, and a row already read is deleted
    new = [create(server) for _ in range(3)]
    assert server.http.delete(f"/v1/instances/{ids[0]}", headers=server.headers).status_code == 200
    while cursor:
        r = get(server, "/v1/instances", limit=2, cursor=cursor)
        assert r.status_code == 200, r.text
        seen += [x["id"] for x in r.json()]
        cursor = r.headers.get("x-next-cursor")
    assert len(seen) == len(set(seen)), f"a row came twice: {seen}"
    assert seen == ids + new, f"pages read {seen}; rows {ids} existed at the start, {new} came while paging"


def test_a_cursor_is_not_a_capability(server: Server) -> None:
    mine = member(server, "lab")
    other = member(server, "rival")
    lab_ids = [create(server, mine) for _ in range(3)]
    rival_ids = [create(server, other) for _ in range(3)]
    admin_page = get(server, "/v1/instances", limit=1)  # the operator sees everyone's
    assert admin_page.status_code == 200
    # the operator's cursor, and a forged one from before every row, in the member's hands
    forged = base64.urlsafe_b64encode(json.dumps({"l": "instances", "k": [0]}).encode()).decode().rstrip("=")
    for cursor in (admin_page.headers["x-next-cursor"], forged):
        r = get(server, "/v1/instances", other, limit=1000, cursor=cursor)
        assert r.status_code == 200, r.text
        assert [x["id"] for x in r.json()] == rival_ids, f"{r.json()} (the lab's rows are {lab_ids})"
    assert [x["id"] for p in pages(server, "/v1/instances", 1, mine) for x in p] == lab_ids
    # a member's cursor into an operator-only list is no way in either
    tenants_cursor = get(server, "/v1/tenants", limit=1).headers["x-next-cursor"]
    assert get(server, "/v1/tenants", other, cursor=tenants_cursor).status_code == 403


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"cursor": "not a cursor!"}, "cursor"),
        ({"cursor": "x" * 601}, "cursor"),
        ({"cursor": "bm90IGpzb24"}, "cursor"),  # base64 of "not json"
        ({"cursor": base64.urlsafe_b64encode(b'{"l":"tenants","k":[1]}').decode().rstrip("=")}, "this list"),
        ({"cursor": base64.urlsafe_b64encode(b'{"l":"instances","k":["1"]}').decode().rstrip("=")}, "damaged"),
        ({"cursor": base64.urlsafe_b64encode(b'{"l":"instances","k":[true]}').decode().rstrip("=")}, "damaged"),
        ({"cursor": base64.urlsafe_b64encode(b'{"l":"instances","k":[1e400]}').decode().rstrip("=")}, "damaged"),
        ({"cursor": base64.urlsafe_b64encode(b'{"l":"instances","k":[99999999999999999999]}').decode().rstrip("=")}, "damaged"),
    ],
)
def test_a_bad_limit_or_cursor_is_refused_with_a_message_and_changes_nothing(server: Server, params: dict, says: str) -> None:
    ids = [create(server) for _ in range(2)]
    r = get(server, "/v1/instances", **params)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid" and says in err["message"], err
    assert [x["id"] for x in get(server, "/v1/instances").json()] == ids


def test_a_node_name_cursor_pages_the_inventory_by_name(server: Server) -> None:
    full = get(server, "/v1/nodes", limit=1000)
    assert "x-next-cursor" not in full.headers
    names = [n["name"] for n in full.json()]
    assert len(names) >= 2 and names == sorted(names), names
    assert [n["name"] for p in pages(server, "/v1/nodes", 1) for n in p] == names


LISTS = [
    "/v1/jobs",
    "/v1/events",
    "/v1/audit",
    "/v1/images",
    "/v1/keys",
    "/v1/tokens",
    "/v1/tenants",
    "/v1/users",
    "/v1/alerts",
    "/v1/billing/grants",
    "/v1/billing/subscriptions",
    "/v1/billing/budget/changes",
]


@pytest.mark.parametrize("path", LISTS)
def test_every_list_pages_to_the_same_rows_as_one_page(server: Server, path: str) -> None:
    for i in range(3):  # rows in most lists: tenants, users, tokens, audit records, events
        member(server, f"t{i}")
        server.post("/v1/tokens", {"name": f"tok{i}"}, expect=201)
    whole = get(server, path, limit=1000)
    assert whole.status_code == 200 and "x-next-cursor" not in whole.headers, whole.text
    got = pages(server, path, 2)
    rows = [r for p in got for r in p]
    if path in ("/v1/events", "/v1/alerts"):  # the latest first, each page oldest first
        assert all([r["id"] for r in p] == sorted(r["id"] for r in p) for p in got), got
        rows = sorted(rows, key=lambda r: r["id"])
    key = "name" if path == "/v1/images" else "id"
    assert [r[key] for r in rows] == [r[key] for r in whole.json()]


def test_the_client_and_the_cli_follow_the_cursor_to_the_end(server: Server) -> None:
    ids = [create(server) for _ in range(5)]
    c = server.client()
    assert [r["id"] for r in c.pages("/v1/instances", limit=2)] == ids
    assert [r["id"] for r in c.instances()] == ids
    images = c.images()
    assert images[0]["default"] and [r["name"] for r in images[1:]] == sorted(r["name"] for r in images[1:])


def test_the_openapi_schema_shows_limit_cursor_and_the_next_header(server: Server) -> None:
    spec = server.http.get("/openapi.json").json()
    for path in ["/v1/instances", *LISTS, "/v1/nodes"]:
        op = spec["paths"][path]["get"]
        names = {p["name"] for p in op["parameters"]}
        assert {"limit", "cursor"} <= names, (path, names)
        assert "X-Next-Cursor" in op["responses"]["200"]["headers"], path
        assert "422" in op["responses"], path
