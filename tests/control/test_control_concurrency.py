"""No double allocation when clients and schedulers race for the last GPUs.

Two complete control loops (separate engines, separate owners, as two API
servers would run them) schedule against one PostgreSQL database while 40
parallel clients submit instances for far fewer GPUs than asked. The database's
capacity constraints must hold every time; the SQLite variant checks the same
with the embedded database's write lock.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from suanli.control.capacity import snapshot
from suanli.control.loop import ControlLoop
from suanli.control.scheduling import Waiting, claim, to_request
from suanli.db.models import Allocation, Gpu, Instance, Node
from suanli.db.session import Database
from suanli.inventory import Inventory
from tests.control.control_helpers import start_server, wait_until
from tests.sqlite_helpers import migrated_sqlite_url

SMALL = Inventory.model_validate(
    {"nodes": [{"name": f"h100-{i}", "gpu_model": "H100", "gpu_count": 2, "cpu_cores": 64, "memory_gib": 256} for i in range(2)]}
)


def _check_no_overallocation(db: Database) -> int:
    """Recount every GPU from allocation rows: never above 1000 milli, and the
    counters match the rows. Returns GPUs in use."""
    with db.sessions() as s:
        per_gpu: dict[tuple[int, int], int] = {}
        for a in s.scalars(select(Allocation).where(Allocation.ended_at.is_(None))):
            for g in a.gpu_indices:
                per_gpu[(a.node_id, int(g))] = per_gpu.get((a.node_id, int(g)), 0) + a.milli_per_gpu
        assert all(v <= 1000 for v in per_gpu.values()), per_gpu
        for g in s.scalars(select(Gpu)):
            assert g.used_milli == per_gpu.get((g.node_id, g.index), 0)
    return len(per_gpu)


@pytest.mark.parametrize("which", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_racing_clients_and_two_schedulers(which: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = migrated_sqlite_url(tmp_path / "race.db") if which == "sqlite" else request.getfixturevalue("pg_url")
    srv = start_server(tmp_path / "a", url, inventory=SMALL, interval_s=0.02)
    # a second "server": its own engine, backend workspace and owner id
    other_db = Database(url)
    other = ControlLoop(other_db, {"local": srv.ctx.backends["local"]}, tmp_path / "a", interval_s=0.02, stop_grace_s=1)
    other.start()
    try:
        asks = [{"gpu_model": "H100", "gpu_count": 1 + (i % 2)} for i in range(40)]
        barrier = threading.Barrier(20)

        def create(body: dict) -> int:
            try:
                barrier.wait(timeout=5)
            except threading.BrokenBarrierError:
                pass
            r = srv.post("/v1/instances", body)
            assert r.status_code == 201, r.text
            return r.json()["id"]

        with ThreadPoolExecutor(20) as pool:
            ids = list(pool.map(create, asks))
        assert len(set(ids)) == 40

        def settled() -> bool:
            rows = srv.get("/v1/instances")
            running = [i for i in rows if i["state"] == "running"]
            return sum(i["gpu_count"] for i in running) == 4 or None

        wait_until(settled, 30)
        wait_until(lambda: srv.ctx.loop.stats.ticks > 5 and other.stats.ticks > 5, 10)
        assert _check_no_overallocation(srv.ctx.db) == 4
        rows = srv.get("/v1/instances")
        assert sum(i["gpu_count"] for i in rows if i["state"] == "running") == 4
        assert all(i["state"] in ("running", "pending") for i in rows)
        # both loops worked on the queue; their claims never overlapped
        assert srv.ctx.loop.stats.launched + other.stats.launched == len([i for i in rows if i["state"] == "running"])
    finally:
        other.stop()
        srv.close()
        other_db.dispose()


@pytest.mark.parametrize("which", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_stale_snapshots_cannot_double_allocate(which: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Eight writers plan on the same snapshot and all pick the same last GPU;
    the database lets exactly one commit."""
    url = migrated_sqlite_url(tmp_path / "stale.db") if which == "sqlite" else request.getfixturevalue("pg_url")
    srv = start_server(tmp_path / "b", url, inventory=SMALL, start_loop=False)
    db = srv.ctx.db
    try:
        with db.transaction() as s:
            rows = [
                Instance(tenant_id=1, user_id=1, gpu_models=["H100"], gpu_count=1, cpu_milli=1000, memory_mib=1024)
                for _ in range(8)
            ]
            s.add_all(rows)
            s.flush()
            waiting = [Waiting("instance", r.id, to_request(r), 1, r.created_at) for r in rows]
            node = s.scalar(select(Node).where(Node.name == "h100-0"))
            # leave exactly one GPU free in the cluster
            s.execute(Gpu.__table__.update().where(Gpu.node_id != node.id).values(used_milli=1000))
            s.execute(Gpu.__table__.update().where(Gpu.node_id == node.id, Gpu.index == 0).values(used_milli=1000))
        with db.transaction() as s:
            snap = snapshot(s, ["local"])  # counters say GPU 1 of h100-0 is free
        from suanli.scheduler import Allocation as A

        target = A("h100-0", (1,), 1000, 1000, 1024)
        engines = [Database(url) for _ in range(8)]
        barrier = threading.Barrier(8)

        def attempt(i: int) -> str:
            barrier.wait(timeout=10)
            try:
                return "won" if claim(engines[i], waiting[i], [target], snap, owner=f"w{i}") else "lost"
            except IntegrityError:
                return "refused"

        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(attempt, range(8)))
        for e in engines:
            e.dispose()
        assert outcomes.count("won") == 1, outcomes
        assert outcomes.count("refused") == 7
        with db.sessions() as s:
            assert s.scalar(select(Gpu.used_milli).where(Gpu.node_id == node.id, Gpu.index == 1)) == 1000
            assert len(list(s.scalars(select(Allocation)))) == 1
            assert len([r for r in s.scalars(select(Instance)) if r.launch_owner]) == 1
    finally:
        srv.close()


def test_unchanged_cluster_skips_what_just_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full cluster with a long queue costs one fingerprint per pass, not one
    placement per waiting request; any change (a release, a new node) retries all."""
    from suanli.control.scheduling import PassMemo, schedule_pass
    from suanli.scheduler import make_policy

    srv = start_server(tmp_path / "c", migrated_sqlite_url(tmp_path / "memo.db"), inventory=SMALL, start_loop=False)
    try:
        for _ in range(6):
            srv.post("/v1/instances", {"gpu_model": "H100", "gpu_count": 2}, expect=201)
        memo, policy = PassMemo(), make_policy("best_fit")
        first = schedule_pass(srv.ctx.db, policy, ["local"], "me", *srv.ctx.loop.admit(), memo=memo)
        assert len(first.claimed) == 2 and len(first.unplaced) == 4
        import suanli.control.scheduling as scheduling

        calls = []
        real = scheduling.plan_gang
        monkeypatch.setattr(scheduling, "plan_gang", lambda *a, **k: calls.append(1) or real(*a, **k))
        again = schedule_pass(srv.ctx.db, policy, ["local"], "me", *srv.ctx.loop.admit(), memo=memo)
        assert again.claimed == [] and again.unplaced == first.unplaced and calls == []
        with srv.ctx.db.transaction() as s:  # one instance gives its GPUs back
            from suanli.control.capacity import give_back

            give_back(s, s.get(Instance, 1))
        third = schedule_pass(srv.ctx.db, policy, ["local"], "me", *srv.ctx.loop.admit(), memo=memo)
        assert len(third.claimed) == 1 and len(third.unplaced) == 3 and len(calls) == 4
    finally:
        srv.close()


def test_a_failing_policy_falls_back_and_leaves_state_clean(tmp_path: Path) -> None:
    from suanli.control.scheduling import schedule_pass
    from suanli.scheduler import make_policy

    srv = start_server(tmp_path / "d", migrated_sqlite_url(tmp_path / "fb.db"), inventory=SMALL, start_loop=False)
    try:
        srv.post("/v1/jobs", {"resources": {"accelerators": "H100:1"}, "num_nodes": 2, "run": "true"}, expect=201)
        broken = make_policy("best_fit")

        def explode(state, req, feasible):  # type: ignore[no-untyped-def]
            raise RuntimeError("policy bug")  # while planning the 2-node gang

        broken.scores = explode  # type: ignore[method-assign]
        result = schedule_pass(srv.ctx.db, broken, ["local"], "me", *srv.ctx.loop.admit(), fallback=make_policy("best_fit"))
        assert result.policy_errors == 1 and len(result.claimed) == 1
        assert _check_no_overallocation(srv.ctx.db) == 2
        with srv.ctx.db.sessions() as s:
            nodes = {a.node_id for a in s.scalars(select(Allocation))}
        assert len(nodes) == 2
    finally:
        srv.close()
