"""Cost so far and rate now per workload (``billing.workload_cost``), on SQLite and
PostgreSQL, at fixed instants: rated + accruing, adding up to the bill's accruing, and
the rate each plan, the disk and a subscription give."""

from __future__ import annotations

from sqlalchemy import event, func, select

from suanli.billing import price_versions, rater, store, workload_cost
from suanli.billing.money import div_half_up
from suanli.billing.pricebook import default_book
from suanli.billing.store import ms_to_dt
from suanli.billing.tables import Usage
from suanli.db.models import Allocation, Instance, Job
from tests.billing.billing_helpers import HOUR, allocate, world


def _usage_sum(w, kind: str, wid: int) -> int:  # type: ignore[no-untyped-def]
    with w.db.sessions() as s:
        return int(
            s.scalar(
                select(func.coalesce(func.sum(Usage.amount), 0)).where(Usage.workload_kind == kind, Usage.workload_id == wid)
            )
        )


def _job_of(w, alloc_id: int) -> int:  # type: ignore[no-untyped-def]
    """The job of an allocation, created (as a real one is) before it started."""
    with w.db.transaction() as s:
        a = s.get(Allocation, alloc_id)
        s.get(Job, a.job_id).created_at = a.started_at
        return int(a.job_id)


def test_cost_so_far_is_rated_plus_accruing_and_adds_up_to_the_bill(db_url: str) -> None:
    book = default_book()
    h = book.gpu("H100").on_demand
    w = world(db_url, disk_gib=100, created_ms=0)
    allocate(w, 0, None, gpus=2)  # the instance: 2 GPUs since 0, still running
    job = _job_of(w, allocate(w, HOUR, HOUR + 600_000, job=True))  # a job that ran 10 min, not rated yet
    rater.run(w.db, cutoff_ms=HOUR + 1)  # rates period 0 of the instance (GPUs and disk) only
    at = HOUR + 1_800_000

    sent: list[str] = []
    event.listen(w.db.engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    [inst] = workload_cost.costs(w.db, "instance", [w.instance_id], at_ms=at).values()
    # what is rated and which records are posted: one read of the records (a listing's page makes it)
    assert sum("billing_usage" in q for q in sent) == 1, sent
    [done] = workload_cost.costs(w.db, "job", [job], at_ms=at).values()
    assert inst.rated == _usage_sum(w, "instance", w.instance_id) > 0, inst
    gpu_hour0 = (600 * 2000 * h + 300_000) // 600_000
    disk_hour0 = (600 * 100 * book.storage + 300 * 720) // (600 * 720)
    assert inst.rated == gpu_hour0 + disk_hour0, inst
    # accruing: half an hour of 2 GPUs and the disk since the rated period
    assert inst.accruing == (300 * 2000 * h + 300_000) // 600_000 + (300 * 100 * book.storage + 300 * 720) // (600 * 720)
    assert done.rated == 0 and done.accruing == (100 * 1000 * h + 300_000) // 600_000, done
    assert inst.so_far == inst.rated + inst.accruing
    # the workloads' accruing parts are the tenant's accruing, as the bill shows it (no transfers here)
    assert inst.accruing + done.accruing == rater.accruing(w.db, w.tenant_id, at)

    # the rate now: 2 GPUs on demand and the disk at the running price
    assert inst.gpu_per_hour == 2 * h and inst.storage_per_hour == div_half_up(100 * book.storage, book.hours_per_month)
    assert done.per_hour == 0  # a finished job holds nothing
    # a minute later the cost so far has grown by about a minute of that rate
    later = workload_cost.costs(w.db, "instance", [w.instance_id], at_ms=at + 60_000)[w.instance_id]
    assert abs(later.so_far - inst.so_far - inst.per_hour // 60) <= 2, (later, inst)

    # once rated, a finished job costs exactly its usage records, which is what it was estimated at
    rater.run(w.db, cutoff_ms=at)
    after = workload_cost.costs(w.db, "job", [job], at_ms=at)[job]
    assert after.rated == _usage_sum(w, "job", job) == done.so_far and after.accruing == 0, after


def test_a_stopped_instance_pays_for_its_disk_only(db_url: str) -> None:
    book = default_book()
    w = world(db_url, disk_gib=50, created_ms=0)
    allocate(w, 0, HOUR)
    with w.db.transaction() as s:
        s.get(Instance, w.instance_id).state = "stopped"
    c = workload_cost.costs(w.db, "instance", [w.instance_id], at_ms=2 * HOUR)[w.instance_id]
    assert c.gpu_per_hour == 0 and c.storage_per_hour == div_half_up(50 * book.storage_stopped, book.hours_per_month) > 0
    assert c.per_hour == c.storage_per_hour and c.so_far > 0
    with w.db.transaction() as s:
        s.get(Instance, w.instance_id).state = "deleted"
    assert workload_cost.costs(w.db, "instance", [w.instance_id], at_ms=2 * HOUR)[w.instance_id].per_hour == 0


def test_rate_of_spot_with_a_bid_and_of_reserved_under_a_subscription(db_url: str) -> None:
    book = default_book()
    g = book.gpu("H100")
    w = world(db_url, created_ms=0)
    w2 = world(db_url, tenant="lab", created_ms=0)  # a second tenant, with a second 8-GPU H100 node
    at = 10 * HOUR
    bid = g.spot_floor + 1
    allocate(w, HOUR, None, gpus=2, priority="spot", max_price=bid)
    job = _job_of(w, allocate(w, HOUR, None, gpus=2, priority="spot", job=True))
    store.topup(w2.db, "lab", "100000")
    store.subscribe(w2.db, "lab", "monthly", "H100", 1, start_ms=0)
    allocate(w2, HOUR, None, priority="reserved")  # covered by the subscription
    allocate(w2, 2 * HOUR, None, priority="reserved")  # beyond it: on demand

    c = workload_cost.costs(w.db, "instance", [w.instance_id], at_ms=at)[w.instance_id]
    j = workload_cost.costs(w.db, "job", [job], at_ms=at)[job]
    util = 6000 * 1000 // 16000  # 6 of 16 H100 busy
    assert c.gpu_per_hour == 2 * min(g.spot(util), bid) == 2 * bid, c
    assert j.gpu_per_hour == 2 * g.spot(util) > c.gpu_per_hour, j  # no bid: the spot price now
    c2 = workload_cost.costs(w2.db, "instance", [w2.instance_id], at_ms=at)[w2.instance_id]
    assert c2.gpu_per_hour == g.on_demand, c2
    # both tenants' workloads on one page: each its own figures
    both = workload_cost.costs(w.db, "instance", [w.instance_id, w2.instance_id], at_ms=at)
    assert both == {w.instance_id: c, w2.instance_id: c2}


def test_a_page_of_many_tenants_is_one_platform_wide_estimate_with_the_same_figures(db_url: str) -> None:
    worlds = [
        world(db_url, tenant=f"t{k}", disk_gib=10 * (k + 1), created_ms=0) for k in range(workload_cost.PER_TENANT_UP_TO + 1)
    ]
    for k, w in enumerate(worlds):
        allocate(w, 0, None, gpus=k + 1)
    rater.run(worlds[0].db, cutoff_ms=HOUR + 1)
    at = HOUR + 1_800_000
    ids = [w.instance_id for w in worlds]
    page = workload_cost.costs(worlds[0].db, "instance", ids, at_ms=at)
    one_by_one = {i: workload_cost.costs(worlds[0].db, "instance", [i], at_ms=at)[i] for i in ids}
    assert page == one_by_one  # on demand: the platform-wide and per-tenant estimates agree
    assert all(c.accruing > 0 and c.rated > 0 for c in page.values()), page
    assert [page[i].gpu_per_hour for i in ids] == [(k + 1) * default_book().gpu("H100").on_demand for k in range(len(ids))]


def _records_of(recs, kind: str, wid: int) -> list[tuple]:  # type: ignore[no-untyped-def]
    """Every column of the GPU and storage records of one workload, sorted."""
    c, want = recs.cols, recs.workload_kinds.index(kind)
    keep = (c["workload_kind"] == want) & (c["workload_id"] == wid) & (c["kind"] != recs.kinds.index("transfer"))
    return sorted(zip(*(c[k][keep].tolist() for k in sorted(c))))


def _own(w, kind: str, ids: list[int], at: int):  # type: ignore[no-untyped-def]
    """The records ``rater.rate_workloads`` gives workloads ``ids`` from their own rows."""
    with w.db.sessions() as s:
        cols = (Instance.id, Instance.tenant_id, Instance.disk_gib, Instance.state, Instance.created_at, Instance.updated_at)
        insts = list(s.execute(select(*cols).where(Instance.id.in_(ids)))) if kind == "instance" else []
        allocs = rater.workload_allocations(s, kind, ids, 0)
        return rater.rate_workloads(price_versions.versions(s), allocs, insts, 0, at, HOUR)


def test_a_pages_own_rows_rate_as_its_whole_tenant_does_unless_they_held_spot_or_reserved(db_url: str) -> None:
    """``rater.rate_workloads`` (a listing's page, a create's answer) gives the records a
    whole-tenant collect gives those workloads; spot or reserved work makes it decline."""
    w = world(db_url, disk_gib=100, created_ms=0)
    allocate(w, 0, HOUR)  # the instance held a GPU for an hour, stopped, and runs 2 again since
    allocate(w, 2 * HOUR, None, gpus=2)
    job = _job_of(w, allocate(w, HOUR, HOUR + 600_000, job=True))
    other = _job_of(w, allocate(w, 0, None, gpus=3, job=True))  # the tenant's other work
    at = 3 * HOUR + 1234
    whole = rater.collect(w.db, 0, at, HOUR, tenant_id=w.tenant_id, open_until_ms=at)
    own_instance, own_job = _own(w, "instance", [w.instance_id], at), _own(w, "job", [job], at)
    assert own_instance is not None and own_job is not None
    assert _records_of(own_instance, "instance", w.instance_id) == _records_of(whole, "instance", w.instance_id) != []
    assert _records_of(own_job, "job", job) == _records_of(whole, "job", job) != []
    assert _records_of(own_job, "job", other) == []  # only the rows asked for were read
    # the figures from the page's own rows still add up with the rest to the bill
    costs = workload_cost.costs(w.db, "job", [job, other], at_ms=at)
    inst = workload_cost.costs(w.db, "instance", [w.instance_id], at_ms=at)[w.instance_id]
    assert inst.accruing + sum(c.accruing for c in costs.values()) == rater.accruing(w.db, w.tenant_id, at)
    with w.db.sessions() as s:  # a listing passes the rows it read (ORM rows), not their ids: the same figures
        listed_jobs, listed_instance = [s.get(Job, job), s.get(Job, other)], [s.get(Instance, w.instance_id)]
    of_jobs = workload_cost.figures_of_rows(w.db, "job", listed_jobs, at_ms=at)
    of_instance = workload_cost.figures_of_rows(w.db, "instance", listed_instance, at_ms=at)
    assert of_jobs.costs == costs and of_instance.costs == {w.instance_id: inst}
    # and, from the same read, what each holds now: the running job's 3 GPUs and the instance's 2, not what ended
    assert {i: [len(a.gpu_indices) for a in held] for i, held in of_jobs.held.items()} == {other: [3]}
    assert {i: [len(a.gpu_indices) for a in held] for i, held in of_instance.held.items()} == {w.instance_id: [2]}

    allocate(w, 3 * HOUR, None, priority="spot")  # spot: priced at the tenant's share of the model
    assert _own(w, "instance", [w.instance_id], at + HOUR) is None
    assert _own(w, "job", [job], at + HOUR) is not None
    reserved = _job_of(w, allocate(w, 3 * HOUR, None, priority="reserved", job=True))
    assert _own(w, "job", [job, reserved], at + HOUR) is None


def test_new_work_costs_at_creation_what_the_full_reading_gives_then(db_url: str) -> None:
    """``at_creation`` (a create's answer) reads only the book: the same figures as
    ``costs`` at the creation instant of an instance (a price change before it in force,
    one after it not) and of a job."""
    created = 3 * HOUR
    w = world(db_url, disk_gib=40, created_ms=created)
    store.set_price(w.db, "ops", None, "storage_stopped", "0.5", effective_ms=HOUR)  # in force at creation
    store.set_price(w.db, "ops", None, "storage_stopped", "9", effective_ms=5 * HOUR)  # not yet
    with w.db.transaction() as s:
        row = s.get(Instance, w.instance_id)
        row.state = "pending"
        s.expunge(row)
    new = workload_cost.at_creation(w.db, "instance", [row])[w.instance_id]
    assert new == workload_cost.costs(w.db, "instance", [w.instance_id], at_ms=created)[w.instance_id]
    assert (new.so_far, new.gpu_per_hour) == (0, 0) and new.storage_per_hour > 0
    with w.db.transaction() as s:  # a job queued at 4 h, placed nowhere yet
        made = Job(tenant_id=w.tenant_id, user_id=w.user_id, spec={}, state="queued", created_at=ms_to_dt(4 * HOUR))
        s.add(made)
        s.flush()
        s.expunge(made)
    assert workload_cost.at_creation(w.db, "job", [made]) == workload_cost.costs(w.db, "job", [made.id], at_ms=4 * HOUR)


def test_a_page_rated_with_only_the_versions_in_force_since_the_watermark_gives_the_whole_reading(db_url: str) -> None:
    """A listing rates its page with the price versions in force from the unrated period on
    (``price_versions.versions_in_force``), not every version: prices changed before that period,
    within it and after the instant asked about give the records and the accruing figure
    a whole-tenant reading with every version gives."""
    w = world(db_url, disk_gib=100, created_ms=0)
    for price, eff in (("25", HOUR // 2), ("26", 2 * HOUR + 600_000), ("90", 10 * HOUR)):
        store.set_price(w.db, "ops", "H100", "on_demand", price, effective_ms=eff)
    store.set_price(w.db, "ops", None, "storage", "0.3", effective_ms=2 * HOUR + 900_000)
    allocate(w, 0, HOUR)
    allocate(w, HOUR + 600_000, None, gpus=2)
    rater.run(w.db, cutoff_ms=2 * HOUR + 1)  # the watermark: the unrated period starts at 2 h
    at = 3 * HOUR + 1234
    with w.db.sessions() as s:
        cols = (Instance.id, Instance.tenant_id, Instance.disk_gib, Instance.state, Instance.created_at, Instance.updated_at)
        insts = list(s.execute(select(*cols).where(Instance.id == w.instance_id)))
        allocs = rater.workload_allocations(s, "instance", [w.instance_id], 2 * HOUR)
        trimmed = price_versions.versions_in_force(s, 2 * HOUR, at)
        every = price_versions.versions(s)
    assert len(trimmed) == 3 < len(every) == 5  # the one in force at 2 h, the two after it
    own = rater.rate_workloads(trimmed, allocs, insts, 2 * HOUR, at, HOUR)
    whole = rater.rate_workloads(every, allocs, insts, 2 * HOUR, at, HOUR)
    assert own is not None and whole is not None
    assert _records_of(own, "instance", w.instance_id) == _records_of(whole, "instance", w.instance_id) != []
    # the periods of 2 h and 3 h are priced at their start: by the version in force at 2 h and the storage change
    assert {int(v) for v in own.cols["price_version"]} == {trimmed[0][0], trimmed[-1][0]}
    cost = workload_cost.costs(w.db, "instance", [w.instance_id], at_ms=at)[w.instance_id]
    assert cost.accruing == rater.accruing(w.db, w.tenant_id, at) > 0
