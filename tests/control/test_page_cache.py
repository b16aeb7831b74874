"""A listing's page kept a few seconds (``api.page_cache``), the app in-process on SQLite
and PostgreSQL, the control loop off (it would move rows between requests): asked again
unchanged, a page is the same answer from its stamps; a change to one of its rows
(the renter's own, or one made behind the API), a price, a subscription or its age make it
computed again; no one is ever answered from another's page."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import event, select, update

from suanli.billing import rater, store
from suanli.billing.workload_cost import billing_stamp
from suanli.clock import ManualClock
from suanli.db.models import Image, Instance, Tenant, WaitingReason
from tests.control.control_helpers import Server, start_server
from tests.control.test_paging import create, get, member


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[Server]:
    srv = start_server(tmp_path / "data", db_url, start_loop=False, runtime="process", allow_process_runtime=True)
    srv.ctx.pages.clock = ManualClock(time.time())
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def statements(server: Server) -> list[str]:
    """The statements sent to the database (transaction control left out) since the last clear."""
    sent: list[str] = []
    event.listen(server.ctx.db.engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    return sent


def queries(sent: list[str]) -> list[str]:
    return [q for q in sent if not q.lstrip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"))]


def without_costs(body: bytes) -> list[dict]:
    """A page's rows less what moves with the wall clock alone (what accrued so far)."""
    return [{k: v for k, v in row.items() if k not in ("cost", "cost_so_far")} for row in json.loads(body)]


def settled(server: Server) -> None:
    """Wait for the pages being computed again in the background (on the app's event loop)."""
    server.http.portal.call(server.ctx.pages.settled)  # type: ignore[union-attr]


def kept(server: Server) -> int:
    """Statements a kept page costs when nothing that changes it was committed since it
    was kept: none where the database tells that (``db.changes``), else its stamps (the
    rows'; the billing stamp is kept with the catalog, ``db.kept``)."""
    return 0 if server.ctx.fresh.watch.can_tell else 1


def test_a_page_asked_again_unchanged_is_the_same_answer_from_its_stamps(server: Server, statements: list[str]) -> None:
    [create(server) for _ in range(3)]
    first = get(server, "/v1/instances", limit=2)
    statements.clear()
    again = get(server, "/v1/instances", limit=2)
    assert again.status_code == 200 and again.content == first.content
    assert len(queries(statements)) == kept(server), statements
    # a commit the watch sees (here: a job's waiting reason) sends it back to the page's
    # rows and the billing stamp (kept with the catalog: no statement), which find it
    # unchanged: the same answer, not computed again
    with server.ctx.db.transaction() as s:
        s.add(WaitingReason(kind="job", workload_id=999, code="capacity", detail=""))
    statements.clear()
    assert get(server, "/v1/instances", limit=2).content == first.content
    assert len(queries(statements)) == 1, statements
    statements.clear()
    assert get(server, "/v1/instances", limit=2).content == first.content
    assert len(queries(statements)) == kept(server), statements
    # the paging headers come back with the kept page
    assert again.headers["x-next-cursor"] == first.headers["x-next-cursor"] and again.headers["link"] == first.headers["link"]
    assert again.headers["content-type"] == first.headers["content-type"] == "application/json"
    # a kept page is what computing it now gives, but for what accrued since
    server.ctx.pages.clear()
    assert without_costs(get(server, "/v1/instances", limit=2).content) == without_costs(first.content)


def test_a_page_reads_waiting_reasons_with_its_rows_and_images_only_for_rows_that_show_them(
    server: Server, statements: list[str]
) -> None:
    """The images' contents (does it have sshd?) matter only to an instance running in a
    container with port 22 published; the rows' waiting reasons come with the rows, in the
    statement that stamps the page (``control.listing``), never in one of their own."""
    waiting, ssh = create(server), create(server)
    statements.clear()
    page = get(server, "/v1/instances", limit=10).json()
    sent = " ".join(queries(statements))
    assert "JOIN waiting_reasons" in sent and "FROM waiting_reasons" not in sent and "FROM images" not in sent, statements
    assert [r["waiting"]["code"] for r in page] == ["scheduling", "scheduling"], page
    with server.ctx.db.transaction() as s:  # both running: one as a host process, one in a container with sshd
        s.execute(
            update(Instance).where(Instance.id == waiting).values(state="running", handles=[{"data": {"runtime": "process"}}])
        )
        handle = {"data": {"runtime": "container", "ports": {"22": 2222}}}
        s.execute(update(Instance).where(Instance.id == ssh).values(state="running", handles=[handle]))
        image = s.scalar(select(Instance.image).where(Instance.id == ssh))
        s.execute(update(Image).where(Image.name == image).values(contents={"sshd": True}))
    statements.clear()
    page = get(server, "/v1/instances", limit=11).json()
    sent = " ".join(queries(statements))
    assert "FROM waiting_reasons" not in sent and "FROM images" in sent, statements
    assert [(r["id"], r["ssh"], r["waiting"]) for r in page] == [
        (waiting, None, None),
        (ssh, f"ssh -p 2222 root@{server.ctx.ssh_host}", None),
    ], page
    with server.ctx.db.transaction() as s:  # no row with port 22 now: no image read
        s.execute(update(Instance).where(Instance.id == ssh).values(handles=[{"data": {"runtime": "container", "ports": {}}}]))
    statements.clear()
    page = get(server, "/v1/instances", limit=12).json()
    assert "FROM images" not in " ".join(queries(statements)) and page[1]["ssh"] is None, (statements, page)


def test_its_age_makes_it_computed_again(server: Server, statements: list[str]) -> None:
    create(server)
    clock = server.ctx.pages.clock
    assert isinstance(clock, ManualClock)
    get(server, "/v1/instances")
    clock.advance(2.9)  # younger than any page's life (3 to 5 s)
    statements.clear()
    get(server, "/v1/instances")
    assert len(queries(statements)) == kept(server)
    clock.advance(2.2)  # 5.1 s old: older than every page's life, younger than stale_ms
    statements.clear()
    get(server, "/v1/instances")  # answered as kept while computed again in the background
    settled(server)
    assert len(queries(statements)) > 2, statements
    statements.clear()
    get(server, "/v1/instances")
    assert len(queries(statements)) == kept(server), statements  # the page computed again is young
    clock.advance(8.1)  # older than stale_ms: computed on the request's path
    statements.clear()
    get(server, "/v1/instances")
    assert len(queries(statements)) > 2 and not server.ctx.pages._refreshing, statements
    clock.set(clock.now() - 60)  # a clock set back: never served from an answer "in the future"
    statements.clear()
    get(server, "/v1/instances")
    assert len(queries(statements)) > 2, statements


def test_a_page_waiting_for_a_busy_refresher_is_answered_as_kept_until_stale(server: Server, statements: list[str]) -> None:
    create(server)
    server.ctx.pages.refreshers = 0  # every background slot taken
    clock = server.ctx.pages.clock
    assert isinstance(clock, ManualClock)
    first = get(server, "/v1/instances")
    clock.advance(5.1)  # past its life: kept, and nothing starts
    statements.clear()
    assert get(server, "/v1/instances").content == first.content
    assert len(queries(statements)) == kept(server) and not server.ctx.pages._refreshing, statements
    clock.advance(3.0)  # 8.1 s: older than stale_ms, the request computes it
    statements.clear()
    get(server, "/v1/instances")
    assert len(queries(statements)) > 2, statements


def test_a_renters_own_change_shows_on_the_next_request(server: Server) -> None:
    ids = [create(server) for _ in range(2)]
    assert [r["state"] for r in get(server, "/v1/instances").json()] == ["pending", "pending"]
    server.post(f"/v1/instances/{ids[0]}/stop", expect=200)
    assert [r["state"] for r in get(server, "/v1/instances").json()] == ["stopped", "pending"]
    new = create(server)
    assert [r["id"] for r in get(server, "/v1/instances").json()] == [*ids, new]
    assert server.http.delete(f"/v1/instances/{ids[1]}", headers=server.headers).status_code == 200
    assert [r["id"] for r in get(server, "/v1/instances").json()] == [ids[0], new]


def test_a_change_behind_the_api_to_any_column_shows_on_the_next_request(server: Server) -> None:
    """No transition and no ``updated_at``: the loop asking a launching instance to stop
    changes ``desired`` alone, and the page shows it at once; so a new waiting reason."""
    iid = create(server)
    assert get(server, "/v1/instances").json()[0]["desired"] == "running"
    with server.ctx.db.transaction() as s:
        s.execute(update(Instance).where(Instance.id == iid).values(desired="stopped"))
    assert get(server, "/v1/instances").json()[0]["desired"] == "stopped"
    # the scheduler's reason for a wait is written apart from the row: shown at once too
    with server.ctx.db.transaction() as s:
        s.add(WaitingReason(kind="instance", workload_id=iid, code="capacity", detail="gpu"))
    assert get(server, "/v1/instances").json()[0]["waiting"]["code"] == "capacity"
    with server.ctx.db.transaction() as s:
        s.get(WaitingReason, ("instance", iid)).code = "price-above-bid"  # type: ignore[union-attr]
    assert get(server, "/v1/instances").json()[0]["waiting"]["code"] == "price-above-bid"


def test_a_new_price_makes_it_computed_again_a_rating_run_does_not(server: Server, statements: list[str]) -> None:
    create(server)
    get(server, "/v1/instances")
    rater.run(server.ctx.db, cutoff_ms=store.now_ms())  # moves what accrued into what is rated: the total stays
    statements.clear()
    get(server, "/v1/instances")
    assert len(queries(statements)) <= 2, statements  # the stamps at most (SQLite saw a commit), never computed
    store.set_price(server.ctx.db, "ops", "H100", "on-demand", "99")
    statements.clear()
    get(server, "/v1/instances")
    assert len(queries(statements)) > 2, statements


def test_the_billing_stamp_moves_with_a_subscription_bought_and_cancelled(server: Server) -> None:
    db = server.ctx.db

    def stamp() -> tuple:
        with db.reads() as s:
            return billing_stamp(s)

    server.post("/v1/tenants", {"name": "acme"}, expect=201)
    store.topup(db, "acme", "1000000")
    before = stamp()
    with db.reads() as s:
        tenant = s.scalar(select(Tenant.id).where(Tenant.name == "acme"))
    sub = store.subscribe(db, "acme", "reserved", "H100", 1)
    bought = stamp()
    store.cancel_subscription(db, sub.id, tenant)
    assert len({before, bought, stamp()}) == 3


def test_no_one_is_answered_from_anothers_page(server: Server) -> None:
    lab, rival = member(server, "lab"), member(server, "rival")
    lab_ids = [create(server, lab) for _ in range(2)]
    rival_ids = [create(server, rival)]
    admin_ids = [create(server)]
    for _ in range(2):  # computed, then kept: the same URL for everyone
        assert [r["id"] for r in get(server, "/v1/instances", lab).json()] == lab_ids
        assert [r["id"] for r in get(server, "/v1/instances", rival).json()] == rival_ids
        assert [r["id"] for r in get(server, "/v1/instances").json()] == lab_ids + rival_ids + admin_ids
    # a second user of the lab's tenant: the same rows, from a page of its own
    lab_too = server.post("/v1/users", {"name": "lab-second", "role": "member", "tenant": "lab"}, expect=201).json()["token"]
    assert [r["id"] for r in get(server, "/v1/instances", lab_too).json()] == lab_ids
    assert get(server, "/v1/instances", "not-a-token").status_code == 401


def test_another_tenants_change_leaves_a_kept_page_kept_and_the_operators_not(server: Server, statements: list[str]) -> None:
    lab, rival = member(server, "lab"), member(server, "rival")
    create(server, lab)
    theirs = create(server, rival)
    mine = get(server, "/v1/instances", lab).content
    everyone = get(server, "/v1/instances").json()
    server.post(f"/v1/instances/{theirs}/stop", expect=200, token=rival)
    statements.clear()
    assert get(server, "/v1/instances", lab).content == mine
    assert len(queries(statements)) == kept(server), statements
    now = get(server, "/v1/instances").json()
    assert [r["state"] for r in now] != [r["state"] for r in everyone] and now[-1]["state"] == "stopped"


def test_a_jobs_page_is_kept_and_a_cancel_shows_at_once(server: Server, statements: list[str]) -> None:
    job = server.post("/v1/jobs", {"name": "j", "run": "true"}, expect=201).json()["id"]
    assert [r["state"] for r in get(server, "/v1/jobs").json()] == ["queued"]
    statements.clear()
    assert [r["state"] for r in get(server, "/v1/jobs").json()] == ["queued"]
    assert len(queries(statements)) == kept(server), statements
    server.post(f"/v1/jobs/{job}/cancel", expect=200)
    assert [r["state"] for r in get(server, "/v1/jobs").json()] == ["cancelled"]


def test_one_instance_or_job_is_read_with_its_waiting_reason_and_never_kept(server: Server, statements: list[str]) -> None:
    """A detail (``GET /v1/instances/{id}``, ``/v1/jobs/{id}``) reads its row and waiting
    reason as a page does, in one statement, then only the cost figures' (and a job's
    dependencies'); it is computed at every request, so every change shows at once."""
    lab, rival = member(server, "lab"), member(server, "rival")
    iid = create(server, lab)
    with server.ctx.db.transaction() as s:
        s.add(WaitingReason(kind="instance", workload_id=iid, code="capacity", detail="gpu"))
    statements.clear()
    first = get(server, f"/v1/instances/{iid}", lab).json()
    assert first["id"] == iid and first["state"] == "pending" and first["waiting"]["code"] == "capacity"
    # the row with its reason, the posted records, the allocations (the billing stamp is kept)
    assert len(queries(statements)) == 3 and sum("waiting_reasons" in q for q in queries(statements)) == 1, statements
    statements.clear()
    get(server, f"/v1/instances/{iid}", lab)
    assert len(queries(statements)) == 3, statements  # computed again: nothing kept
    assert get(server, f"/v1/instances/{iid}", rival).status_code == 404
    with server.ctx.db.transaction() as s:  # a change behind the API
        s.execute(update(Instance).where(Instance.id == iid).values(desired="stopped"))
    assert get(server, f"/v1/instances/{iid}", lab).json()["desired"] == "stopped"
    assert server.http.delete(f"/v1/instances/{iid}", headers={"Authorization": f"Bearer {lab}"}).status_code == 200
    gone = get(server, f"/v1/instances/{iid}", lab)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"

    job = server.post("/v1/jobs", {"name": "j", "run": "true"}, expect=201, token=lab).json()["id"]
    statements.clear()
    assert get(server, f"/v1/jobs/{job}", lab).json()["state"] == "queued"
    # the row with its reason, the posted records, the allocations, its dependencies
    assert len(queries(statements)) == 4 and sum("waiting_reasons" in q for q in queries(statements)) == 1, statements
    assert get(server, f"/v1/jobs/{job}", rival).status_code == 404
    assert get(server, f"/v1/jobs/{job}").json()["id"] == job  # the operator sees every tenant's
    server.post(f"/v1/jobs/{job}/cancel", expect=200, token=lab)
    assert get(server, f"/v1/jobs/{job}", lab).json()["state"] == "cancelled"
    assert get(server, f"/v1/jobs/{job + 1}", lab).status_code == 404


def test_a_create_answers_what_a_read_right_after_shows_and_reads_only_the_price_book_for_it(
    server: Server, statements: list[str]
) -> None:
    """The answer of ``POST /v1/instances`` is the instance as at its creation
    (``workload_cost.at_creation``): what ``GET`` shows next, its cost figures included,
    with no read of usage, allocations, the market or waiting reasons to build it. So is a
    job's (``POST /v1/jobs``)."""
    token = member(server, "acme")
    store.set_price(server.ctx.db, "ops", None, "storage_stopped", "3")  # a disk's price that shows
    statements.clear()
    made = server.post("/v1/instances", {"gpu_milli": 100, "disk_gib": 500}, expect=201, token=token).json()
    sent = queries(statements)
    inserted = next(i for i, q in enumerate(sent) if q.lstrip().upper().startswith("INSERT INTO INSTANCES"))
    answer = sent[inserted:]  # the funds check before it reads the tenant's usage, as it must
    assert not [q for q in answer if "billing_usage" in q or "allocations" in q or "waiting_reasons" in q], answer
    shown = get(server, f"/v1/instances/{made['id']}", token).json()
    moves = ("cost", "cost_so_far", "updated_at")  # what accrued since, to the micro-unit; nothing else moved
    assert {k: v for k, v in made.items() if k not in moves} == {k: v for k, v in shown.items() if k not in moves}
    assert made["cost"]["per_hour"] == shown["cost"]["per_hour"] > 0 and made["cost"]["so_far"] == 0
    assert made["waiting"]["code"] == "scheduling" and made["allocations"] == []
    job = server.post("/v1/jobs", {"run": "true", "resources": {"cpus": 1}}, expect=201, token=token).json()
    assert job == get(server, f"/v1/jobs/{job['id']}", token).json() and job["cost"]["so_far"] == 0, job


def test_a_page_computed_from_its_stamp_shows_its_rows_as_a_query_loads_them(server: Server) -> None:
    """A changed page is computed from the rows its stamp read (``control.listing``):
    objects built from plain values, JSON decoded, equal in every column to what the ORM
    loads, for instances and jobs; and their waiting reasons as the loop wrote them."""
    from suanli.control import instances, jobs
    from suanli.control.auth import Principal
    from suanli.db.models import Job

    first, second = create(server), create(server)
    with server.ctx.db.transaction() as s:  # JSON of each shape, NULL and not, a bid, a wait of the loop's
        s.execute(
            update(Instance)
            .where(Instance.id == second)
            .values(
                state="running",
                handles=[{"backend": "local", "data": {"runtime": "container", "ports": {"22": 2222}}}],
                ports=[8888, 6006],
                secrets={"TOKEN": {"sealed": "x"}},
                max_price_micros=1_250_000,
                autostop_s=600,
                active_at=1234.5,
            )
        )
        s.add(WaitingReason(kind="instance", workload_id=first, code="capacity", detail="gpu"))
        tenant = s.scalar(select(Instance.tenant_id).where(Instance.id == first))
        user = s.scalar(select(Instance.user_id).where(Instance.id == first))
        s.add(Job(tenant_id=tenant, user_id=user, spec={"command": "echo 你好", "env": {"A": "1"}}, gpu_models=["H100"]))
    who = Principal(user_id=0, tenant_id=None, name="ops", role="admin")
    columns = [c.key for c in Instance.__mapper__.column_attrs]
    job_columns = [c.key for c in Job.__mapper__.column_attrs]
    with server.ctx.db.reads() as s:
        listed = instances.listing(s, who)
        listed_jobs = jobs.listing(s, who)
    with server.ctx.db.sessions() as s:
        loaded = list(s.scalars(select(Instance).order_by(Instance.id)))
        loaded_jobs = list(s.scalars(select(Job).order_by(Job.id)))
        assert [[getattr(r, c) for c in columns] for r in listed.rows] == [[getattr(r, c) for c in columns] for r in loaded]
        assert [[getattr(r, c) for c in job_columns] for r in listed_jobs.rows] == [
            [getattr(r, c) for c in job_columns] for r in loaded_jobs
        ]
    assert [r.id for r in listed.rows] == [first, second] and listed.rows[1].ports == [8888, 6006]
    assert listed_jobs.rows[0].spec == {"command": "echo 你好", "env": {"A": "1"}}
    reason, since = listed.waits[first]
    assert (reason.code, reason.detail) == ("capacity", "gpu") and since is not None
    assert second not in listed.waits and listed_jobs.waits == {}
