"""The dashboard's figures (``control.dashboard``): allocation per GPU model averaged
over each bucket, spend and revenue per day, the queue and node states; the route gives
operators the platform's figures and members only their own spend."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import func, select

from suanli.billing.tables import Usage
from suanli.control.dashboard import dashboard
from suanli.db.models import Allocation, Gpu, Instance, Node, Tenant, User
from tests.control.control_helpers import Server

NOW = datetime(2026, 12, 3, 10, 30, tzinfo=UTC)


def _alloc(s, owner: Instance, node: Node, gpus: int, milli: int, start: datetime, end: datetime | None) -> None:  # type: ignore[no-untyped-def]
    s.add(
        Allocation(
            tenant_id=owner.tenant_id, instance_id=owner.id, node_id=node.id, gpu_model=node.gpu_model,
            gpu_indices=list(range(gpus)), milli_per_gpu=milli, cpu_milli=0, memory_mib=0, priority="on-demand",
            started_at=start, ended_at=end,
        )
    )  # fmt: skip


def _usage(s, tenant: int, source: int, start: datetime, amount: int) -> None:  # type: ignore[no-untyped-def]
    ms = int(start.timestamp() * 1000)
    s.add(
        Usage(
            kind="gpu", source_id=source, period_ms=ms, tenant_id=tenant, workload_kind="instance", workload_id=source,
            gpu_model="H100", plan="on-demand", start_ms=ms, end_ms=ms + 6000, quantity=1000, billed_seconds=6,
            unit_price=1, amount=amount, currency="CNY", price_version=1, run_id="t",
        )
    )  # fmt: skip


def test_allocation_is_the_held_share_of_each_bucket_and_spend_is_per_day(server: Server) -> None:
    server.ctx.loop.stop()  # rows written by hand below: no pass may act on them
    db = server.ctx.db
    with db.transaction() as s:
        admin = s.scalars(select(User).order_by(User.id)).first()
        tenant = admin.tenant_id
        other = Tenant(name="other")
        s.add(other)
        h100 = s.scalars(select(Node).where(Node.gpu_model == "H100").order_by(Node.id)).first()
        total = s.scalar(select(func.count(Gpu.id)).join(Node, Node.id == Gpu.node_id).where(Node.gpu_model == "H100"))
        owners = [
            Instance(tenant_id=tenant, user_id=admin.id, state="stopped", desired="stopped", gpu_models=["H100"])
            for _ in range(2)
        ]
        s.add_all(owners)
        s.flush()
        _alloc(s, owners[0], h100, 2, 1000, NOW.replace(hour=7, minute=0), NOW.replace(hour=9, minute=0))
        _alloc(s, owners[1], h100, 1, 500, NOW.replace(hour=9, minute=30), None)  # half a GPU, still held
        _usage(s, tenant, 1, datetime(2026, 12, 2, 23, 59, tzinfo=UTC), 1_000_000)
        _usage(s, tenant, 2, datetime(2026, 12, 3, 0, 1, tzinfo=UTC), 2_500_000)
        _usage(s, tenant, 3, datetime(2026, 12, 3, 8, 0, tzinfo=UTC), 500_000)
        _usage(s, other.id, 4, datetime(2026, 12, 3, 8, 0, tzinfo=UTC), 7_000_000)
        _usage(s, tenant, 5, datetime(2026, 11, 30, 8, 0, tzinfo=UTC), 9_000_000)  # outside a 2-day window

    with db.sessions() as s:
        board = dashboard(s, tenant, "CNY", 2, True, lambda kind, ids: {}, now=NOW)
        member = dashboard(s, other.id, "CNY", 2, False, lambda kind, ids: {}, now=NOW)
    assert board.spend.starts == ["2026-12-02", "2026-12-03"]
    assert board.spend.values["spend"] == [1_000_000, 3_000_000]
    assert member.spend.values["spend"] == [0, 7_000_000] and member.cluster is None
    assert board.cluster is not None
    assert board.cluster["revenue"].values["revenue"] == [1_000_000, 10_000_000]
    alloc = board.cluster["allocation"]
    hour = {start: share for start, share in zip(alloc.starts, alloc.values["H100"])}
    assert len(alloc.starts) == 48 and alloc.starts[-1] == "2026-12-03T10:00:00+00:00"
    assert hour["2026-12-03T06:00:00+00:00"] == 0
    assert hour["2026-12-03T07:00:00+00:00"] == hour["2026-12-03T08:00:00+00:00"] == round(2 / total, 6)
    assert hour["2026-12-03T09:00:00+00:00"] == round(0.5 * 0.5 / total, 6)  # half a GPU for half the hour
    assert hour["2026-12-03T10:00:00+00:00"] == round(0.5 * 0.5 / total, 6)  # up to now (10:30)
    assert set(alloc.values) >= {"H100", "A100-80G"} and not any(alloc.values["A100-80G"])
    assert board.cluster["held_now"]["H100"] == {"held": 0.5, "total": total}  # the half GPU still held


def test_the_route_gives_operators_the_platform_and_refuses_a_bad_window(server: Server) -> None:
    server.post("/v1/instances", {"gpu_model": "h100", "gpu_count": 1}, expect=201)
    board = server.get("/v1/dashboard", params={"days": 7})
    assert len(board["spend"]["starts"]) == 7 and board["currency"]
    cluster = board["cluster"]
    assert cluster["nodes"]["total"] == sum(cluster["nodes"]["states"].values()) > 0
    assert len(cluster["allocation"]["starts"]) == 28  # six-hour buckets over a week
    for days in (0, 91, "x"):
        r = server.http.get("/v1/dashboard", params={"days": days}, headers=server.headers)
        assert r.status_code == 422, (days, r.text)
    server.post("/v1/tenants", {"name": "acme"}, expect=201)
    member = server.post("/v1/users", {"name": "m", "tenant": "acme"}, expect=201).json()["token"]
    mine = server.http.get("/v1/dashboard", headers={"Authorization": f"Bearer {member}"})
    assert mine.status_code == 200 and mine.json()["cluster"] is None
