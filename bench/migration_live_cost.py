"""What the live control loop's migration phase (``control.migrate``, issue 16) costs at
the size of the Alibaba cluster, where the simulator measured the planners alone.

    .venv/bin/python bench/migration_live_cost.py [--planners direct,repack] [--requests 20]
    .venv/bin/python bench/migration_live_cost.py --db postgresql+psycopg://postgres@127.0.0.1:5432/test

1. **The state.** The default trace's pods arrive as in the fill experiment (``fgd``,
   ``--seed``, tune 1.3) until ``--arrived`` of the cluster's GPU milli has been asked
   for; the first ``--requests`` whole-GPU, single-node pods that fit nowhere after that
   are the requests to plan for.
2. **The live database.** The 1,213 nodes of the node list as an inventory (of the
   in-memory fake backend: nothing is launched), and every placed pod a running job
   with its allocation (``capacity.take``). Every share gets a ``checkpoint_dir``, so
   every share may move: the most the phase has to consider.
3. **The phase.** For each planner and request, ``Migrator.migrate`` as the loop calls
   it (the reads, the snapshot, the planner, the notices), wall and CPU time, and its
   planner call alone; the notices it gives are withdrawn before the next request, so
   each plans on the same state. Also the snapshot alone (``capacity.snapshot``), and a
   scheduling pass over the same requests (``scheduling.schedule_pass``: the snapshot,
   then the policy on each; none fits, so nothing is claimed): what every tick with
   work waiting costs at this size, migration or not.

Target (issue 16, "Speed"): a repack plan ≤ 1 s p99 at 1,213 nodes. Prints one JSON
line per planner.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from dag_scale import fresh_db  # noqa: E402
from sqlalchemy import select, update  # noqa: E402

from suanli.api.server import build  # noqa: E402
from suanli.backends.memory import InMemoryBackend  # noqa: E402
from suanli.clock import ManualClock  # noqa: E402
from suanli.control import migrate as migrate_phase  # noqa: E402
from suanli.control.capacity import snapshot, take  # noqa: E402
from suanli.control.loop import ControlLoop  # noqa: E402
from suanli.control.notice import clear_notice  # noqa: E402
from suanli.control.plane import MigrationSettings  # noqa: E402
from suanli.control.scheduling import Waiting, schedule_pass  # noqa: E402
from suanli.db.models import Job, Node, User  # noqa: E402
from suanli.inventory import Inventory, NodeDecl  # noqa: E402
from suanli.scheduler import ClusterState, Request, Scheduler, TargetWorkload, make_policy  # noqa: E402
from suanli.scheduler.repack import PLANNERS  # noqa: E402
from suanli.sim.fill import arrival_order  # noqa: E402
from suanli.sim.traces import load_nodes, load_pods  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces" / "alibaba-gpu-2023"


def fill(trace: str, seed: int, arrived_share: float, wanted: int) -> tuple[list, list[tuple[Request, object]], list[Request]]:
    """The sim nodes, the placed pods (request, allocation) and the first ``wanted``
    whole-GPU pods that failed after ``arrived_share`` had arrived."""
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    requests = [p.request for p in load_pods(TRACES / f"openb_pod_list_{trace}.csv")]
    state = ClusterState(nodes)
    scheduler = Scheduler(make_policy("fgd", TargetWorkload.from_requests(requests), seed), state, seed=seed)
    capacity = state.total_gpu_milli
    placed: list[tuple[Request, object]] = []
    failed: list[Request] = []
    arrived = 0
    for key, req in enumerate(arrival_order(requests, capacity, 1.3, seed)):
        arrived += req.total_gpu_milli
        if arrived > capacity or len(failed) >= wanted:
            break
        alloc = scheduler.schedule(req, key=key).allocation
        if alloc is not None:
            placed.append((req, alloc))
        elif arrived > arrived_share * capacity and req.gpu_count >= 1 and not req.is_sharing:
            failed.append(req)
    return nodes, placed, failed


def live_loop(db_url: str | None, nodes: list) -> ControlLoop:
    """A control loop on a fresh database whose inventory is ``nodes``, on the fake backend."""
    root = Path(tempfile.mkdtemp(prefix="suanli-migration-cost-"))
    inv = Inventory(
        nodes=[
            NodeDecl(
                name=n.name,
                gpu_model=n.gpu_model or "none",
                gpu_count=n.gpu_count,
                cpu_cores=n.cpu_milli / 1000,
                memory_gib=n.memory_mib // 1024,
            )
            for n in nodes
        ]
    )
    ctx, _ = build(root / "data", db_url, start_loop=False, inventory=inv, audit=False)
    with ctx.db.transaction() as s:  # the inventory format names real backends only
        s.execute(update(Node).values(backend="memory"))
    fake = InMemoryBackend("memory", tuple(n.name for n in nodes))
    return ControlLoop(ctx.db, {"memory": fake}, root / "data", clock=ManualClock(time.time()))


def load(loop: ControlLoop, placed: list[tuple[Request, object]]) -> int:
    """Every placed pod as a running job holding its allocation; the shares."""
    shares = 0
    with loop.db.transaction() as s:
        admin = s.scalars(select(User).order_by(User.id)).first()
        assert admin is not None
        snap = snapshot(s, ["memory"])
        now = datetime.now(UTC)
        for i, (req, alloc) in enumerate(placed):
            spec: dict = {"run": "train"}
            if req.is_sharing:
                spec["checkpoint_dir"] = "ckpt"
                shares += 1
            job = Job(
                tenant_id=admin.tenant_id,
                user_id=admin.id,
                state="running",
                spec=spec,
                gpu_models=sorted(req.gpu_models),
                gpu_count=req.gpu_count,
                gpu_milli=req.gpu_milli,
                cpu_milli=req.cpu_milli,
                memory_mib=req.memory_mib,
                handles=[{"backend": "memory", "key": f"pod-{i}", "data": {}}],
                runtime="process",
                started_at=now,
            )
            s.add(job)
            s.flush()
            take(s, job, [alloc], snap)  # type: ignore[list-item]
    return shares


def withdraw_all(loop: ControlLoop) -> None:
    with loop.db.transaction() as s:
        for row in s.scalars(select(Job).where(Job.notice_deadline.is_not(None))):
            clear_notice(row)


def timed(fn: Callable, into: list[float]) -> Callable:
    def call(*args, **kwargs):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            into.append(time.perf_counter() - t)

    return call


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default=None, help="PostgreSQL admin URL (a fresh database is made next to it); SQLite if absent")
    ap.add_argument("--trace", default="default")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--arrived", type=float, default=0.9, help="plan for whole-GPU pods failing after this share arrived")
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--planners", default="direct,repack")
    ap.add_argument("--moves", type=int, default=8)
    args = ap.parse_args()

    nodes, placed, failed = fill(args.trace, args.seed, args.arrived, args.requests)
    loop = live_loop(fresh_db(args.db), nodes)
    t = time.perf_counter()
    shares = load(loop, placed)
    setup_s = time.perf_counter() - t
    # the fill's pods and the setup's rows are the bench's, not the worker's: frozen, as
    # a server part freezes what it holds at its start (``api.parts``), so the worker's
    # collections do not walk them
    gc.collect()
    gc.freeze()
    if args.db:  # statistics, as autovacuum keeps them on a database that grew to this size
        with loop.db.engine.connect() as c:
            c.exec_driver_sql("ANALYZE")
            c.commit()
    snap_s, pass_s = [], []
    waiting = [Waiting("job", 10_000_000 + i, req, 1, datetime.now(UTC), None) for i, req in enumerate(failed)]
    for _ in range(5):
        with loop.db.transaction() as s:
            t = time.perf_counter()
            snapshot(s, ["memory"])
            snap_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        schedule_pass(loop.db, loop.policy, ["memory"], loop.owner, waiting)  # none fits: nothing is claimed
        pass_s.append(time.perf_counter() - t)
    migrator = loop.migrator
    for name in args.planners.split(","):
        loop.plane.migration = MigrationSettings(moves=args.moves, planner=name, retry_s=0)
        planner_s: list[float] = []
        migrate_phase.PLANNERS = {name: timed(PLANNERS[name], planner_s)}
        wall, cpu, moved, planned = [], [], [], 0
        for w in waiting:
            migrator.tried.clear()
            t, c = time.perf_counter(), time.process_time()
            told = migrator.migrate([w])
            wall.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            moved.append(len(told))
            planned += bool(told)
            withdraw_all(loop)
        migrate_phase.PLANNERS = PLANNERS
        print(
            json.dumps(
                {
                    "db": "postgresql" if args.db else "sqlite",
                    "planner": name,
                    "nodes": len(nodes),
                    "running_jobs": len(placed),
                    "movable_shares": shares,
                    "setup_s": round(setup_s, 1),
                    "snapshot_p50_s": round(pct(snap_s, 0.5), 3),
                    "schedule_pass_p50_s": round(pct(pass_s, 0.5), 3),
                    "requests": len(failed),
                    "with_moves": planned,
                    "moves_mean": round(statistics.fmean(moved), 2) if moved else 0,
                    "phase_p50_s": round(pct(wall, 0.5), 3),
                    "phase_p99_s": round(pct(wall, 0.99), 3),
                    "phase_cpu_p50_s": round(pct(cpu, 0.5), 3),
                    "planner_p50_s": round(pct(planner_s, 0.5), 3) if planner_s else None,
                    "planner_p99_s": round(pct(planner_s, 0.99), 3) if planner_s else None,
                    "planner_calls": len(planner_s),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
