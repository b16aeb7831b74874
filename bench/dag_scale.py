"""Pipelines at scale: a DAG of 1,000 jobs over 128 nodes on the local backend (host
processes), in-process (the control loop's own thread, no HTTP), SQLite by default.

1. **latency**: a random layered DAG of ``--jobs`` jobs (each of one H100, ``true`` or a
   random sleep; job i waits for 1-3 of the 200 jobs before it, the first 64 for none),
   then a DAG of ``--chains`` parallel chains (few launches at once), runs to the end
   under the real control loop; for every dependent job, the time from its last
   dependency's end (``finished_at``, from the backend's exit report) to its start
   (``started_at``, its process running). Target: at most 1 s at 1,000 jobs.
2. **tick**: for each DAG size in ``--sizes``, a fresh database with one running root
   (``sleep``) and size-1 jobs waiting on it (the same DAG shape); the median of
   ``--ticks`` control-loop ticks (``ControlLoop.tick``: health, reconcile, the
   dependency cancel, admission with the gate, a scheduling pass) and their 10th
   percentile, against the same run's baseline, the root alone. Then the root is
   cancelled and the one tick that cancels the whole DAG, transitively, is timed, and
   its pipelines phase alone (``cascade_phase_ms``). Ratios tell linear (x10 jobs -> about
   x10 of the per-job part) from quadratic (x100).

    .venv/bin/python bench/dag_scale.py [--jobs 1000] [--nodes 128] [--sizes 100,300,1000] [--sleep 0,4]
    .venv/bin/python bench/dag_scale.py --db postgresql+psycopg://postgres@127.0.0.1:5432/test   # PostgreSQL

Prints one JSON line per measurement.
"""

from __future__ import annotations

import argparse
import atexit
import itertools
import json
import logging
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine, select, text

from suanli.api.server import build
from suanli.control import jobs, pipelines
from suanli.control.auth import Principal
from suanli.control.task import Task
from suanli.db.models import Allocation, Event, Job, JobDependency
from suanli.inventory import Inventory

ADMIN = Principal(user_id=1, tenant_id=1, name="admin", role="admin")


def inventory(nodes: int) -> Inventory:
    return Inventory.model_validate(
        {
            "nodes": [
                {
                    "name": f"h100-{i}",
                    "gpu_model": "H100",
                    "gpu_count": 8,
                    "gpu_memory_gib": 80,
                    "cpu_cores": 128,
                    "memory_gib": 1024,
                    "ib_leaf": f"leaf-{i // 16}",
                }
                for i in range(nodes)
            ]
        }
    )


def dag(n: int, run: str, seed: int = 1, first: int = 64, window: int = 200, sleep_s: float = 0.0, chains: int = 0) -> list[Task]:
    """``n`` tasks; task i >= ``first`` waits for 1-3 of the ``window`` tasks before it.
    ``sleep_s``: each runs ``sleep`` for a random 0..sleep_s seconds first (seeded).
    ``chains``: instead, that many parallel chains (task i waits for task i - chains)."""
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        if chains:
            deps = [f"j{i - chains}"] if i >= chains else []
        else:
            deps = (
                []
                if i < max(first, 1)
                else sorted({f"j{rng.randrange(max(0, i - window), i)}" for _ in range(rng.randint(1, 3))})
            )
        if sleep_s:
            run = f"sleep {rng.uniform(0, sleep_s):.2f}"
        tasks.append(
            Task.model_validate(
                {"name": f"j{i}", "resources": {"accelerators": "H100:1", "cpus": 1, "memory": 1}, "run": run, "depends_on": deps}
            )
        )
    return tasks


def fresh_db(admin_url: str | None) -> str | None:
    """A new empty PostgreSQL database next to ``admin_url`` (dropped at exit); None: SQLite."""
    if admin_url is None:
        return None
    name = f"suanli_bench_dag_{os.getpid()}_{next(_made)}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()

    def drop() -> None:
        engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()

    atexit.register(drop)
    return admin_url.rsplit("/", 1)[0] + "/" + name


_made = itertools.count()


def server(nodes: int, admin_url: str | None):  # type: ignore[no-untyped-def]
    data = Path(tempfile.mkdtemp(prefix="suanli-dag-")) / "data"
    db_url = fresh_db(admin_url)
    ctx, _ = build(
        data,
        db_url,
        start_loop=False,
        inventory=inventory(nodes),
        runtime="process",
        allow_process_runtime=True,
        audit=False,
        interval_s=0.5,
        stop_grace_s=2.0,
    )
    return ctx


def latency(n: int, nodes: int, db_url: str | None, timeout_s: float, sleep_s: float, chains: int = 0) -> dict:
    ctx = server(nodes, db_url)
    loop = ctx.loop
    try:
        t0 = time.perf_counter()
        pipelines.submit(ctx.db, ADMIN, dag(n, "true", sleep_s=sleep_s, chains=chains), "bench")
        submit_s = time.perf_counter() - t0
        loop.start()
        deadline = time.monotonic() + timeout_s
        while True:
            with ctx.db.sessions() as s:
                left = s.scalars(select(Job.id).where(Job.state.in_(("queued", "running")))).all()
            if not left:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{len(left)} jobs still open after {timeout_s}s")
            time.sleep(0.5)
        makespan = time.perf_counter() - t0 - submit_s
        loop.stop()  # before reading: the figures are the run's, not a still-ticking loop's
        with ctx.db.sessions() as s:
            got = {j.id: j for j in s.scalars(select(Job))}
            edges = s.execute(select(JobDependency.job_id, JobDependency.depends_on_id)).all()
            seen_at = {
                e.object_id: e.ts.timestamp()
                for e in s.scalars(select(Event).where(Event.kind == "job", Event.to_state.in_(("succeeded", "failed"))))
            }
            claimed_at = {
                a.job_id: a.started_at.timestamp() for a in s.scalars(select(Allocation).where(Allocation.node_rank == 0))
            }
        states: dict[str, int] = {}
        for j in got.values():
            states[j.state] = states.get(j.state, 0) + 1
        last_dep: dict[int, tuple[float, int]] = {}
        for j, d in edges:
            end = got[d].finished_at
            assert end is not None
            last_dep[j] = max(last_dep.get(j, (0.0, 0)), (end.timestamp(), d))
        lat, seen, claimed, launched = [], [], [], []
        for j, (end, d) in last_dep.items():
            start = got[j].started_at
            assert start is not None
            lat.append(start.timestamp() - end)
            seen.append(seen_at[d] - end)  # the loop records the end
            claimed.append(claimed_at[j] - seen_at[d])  # ... places the dependent
            launched.append(start.timestamp() - claimed_at[j])  # ... its process runs
        lat.sort()
        return {
            "measure": "dependency end -> dependent start",
            "jobs": n,
            "nodes": nodes,
            "run": f"sleep 0..{sleep_s} s" if sleep_s else "true",
            "shape": f"{chains} chains" if chains else "random layered",
            "edges": len(edges),
            "states": states,
            "submit_s": round(submit_s, 2),
            "makespan_s": round(makespan, 1),
            "dependents": len(lat),
            "median_s": round(statistics.median(lat), 3),
            "p95_s": round(lat[int(len(lat) * 0.95)], 3),
            "max_s": round(lat[-1], 3),
            "over_1s": sum(x > 1.0 for x in lat),
            "parts_median_p95_s": {
                k: [round(statistics.median(v), 3), round(sorted(v)[int(len(v) * 0.95)], 3)]
                for k, v in (("end->recorded", seen), ("recorded->placed", claimed), ("placed->started", launched))
            },
            "ticks": loop.stats.ticks,
        }
    finally:
        loop.stop()
        for b in ctx.backends.values():
            for h in b.list_running():
                b.stop(h, grace_s=1)
        ctx.db.dispose()


def ticks(n: int, nodes: int, db_url: str | None, repeat: int) -> dict:
    """Median tick with ``n`` jobs: one running root, the rest waiting on it; then the
    tick that cancels them all once the root is cancelled."""
    ctx = server(nodes, db_url)
    loop = ctx.loop
    try:
        root = pipelines.submit(
            ctx.db, ADMIN, [Task.model_validate({"name": "root", "resources": {"accelerators": "H100:1"}, "run": "sleep 600"})]
        )[0]
        if n > 1:
            rest = dag(n - 1, "true", first=0)
            rest = [t.model_copy(update={"depends_on": [*t.depends_on, root.id] if t.depends_on else [root.id]}) for t in rest]
            pipelines.submit(ctx.db, ADMIN, rest, "bench")
        loop.recover()
        for _ in range(20):  # the root placed and started
            loop.tick()
            with ctx.db.sessions() as s:
                if s.get(Job, root.id).state == "running":  # type: ignore[union-attr]
                    break
            time.sleep(0.05)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            loop.tick()
            times.append(time.perf_counter() - t0)
        phase = loop.cancel_doomed
        cancels: list[tuple[float, int]] = []

        def timed() -> list[int]:
            t0 = time.perf_counter()
            out = phase()
            cancels.append((time.perf_counter() - t0, len(out)))
            return out

        loop.cancel_doomed = timed  # type: ignore[method-assign]
        jobs.cancel(ctx.db, ADMIN, root.id)
        cascade = cascade_phase = None
        for _ in range(100):
            cancels.clear()
            t0 = time.perf_counter()
            loop.tick()
            took = time.perf_counter() - t0
            with ctx.db.sessions() as s:
                open_ = s.scalars(select(Job.id).where(Job.state.in_(("queued", "running")))).all()
            if not open_:
                cascade, cascade_phase = took, max(c[0] for c in cancels) if cancels else None
                break
            time.sleep(0.05)
        with ctx.db.sessions() as s:
            cancelled = len(s.scalars(select(Job.id).where(Job.state == "cancelled")).all())
        return {
            "measure": "tick",
            "jobs": n,
            "median_ms": round(statistics.median(times) * 1000, 2),
            "p10_ms": round(sorted(times)[len(times) // 10] * 1000, 2),
            "cascade_tick_ms": None if cascade is None else round(cascade * 1000, 1),
            "cascade_phase_ms": None if cascade_phase is None else round(cascade_phase * 1000, 1),
            "cancelled": cancelled,
        }
    finally:
        loop.stop()
        for b in ctx.backends.values():
            for h in b.list_running():
                b.stop(h, grace_s=1)
        ctx.db.dispose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--sizes", default="100,300,1000", help="DAG sizes for the tick measure")
    ap.add_argument("--ticks", type=int, default=30)
    ap.add_argument(
        "--db",
        default=None,
        help="a PostgreSQL URL to create a fresh database next to, per measure (default: SQLite in a temporary directory)",
    )
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-ticks", action="store_true")
    ap.add_argument(
        "--sleep", default="0,4", help="latency runs: each job sleeps a random 0..S s (0: runs `true`), comma-separated"
    )
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument(
        "--chains", type=int, default=16, help="also a DAG of this many parallel chains (few launches at once; 0: skip)"
    )
    args = ap.parse_args()
    logging.basicConfig(format="%(asctime)s %(threadName)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    if not args.skip_ticks:
        base = ticks(1, args.nodes, args.db, args.ticks)
        print(json.dumps({**base, "baseline": True}), flush=True)
        for n in (int(x) for x in args.sizes.split(",")):
            r = ticks(n, args.nodes, args.db, args.ticks)
            # p10: the least disturbed ticks (a shared box's load moves the median)
            extra = max(r["p10_ms"] - base["p10_ms"], 0.0)
            r["p10_ratio_to_baseline"] = round(r["p10_ms"] / base["p10_ms"], 2)
            r["p10_extra_us_per_job"] = round(extra * 1000 / (n - 1), 2)
            print(json.dumps(r), flush=True)
    if not args.skip_latency:
        for sleep_s in (float(x) for x in args.sleep.split(",")):
            print(json.dumps(latency(args.jobs, args.nodes, args.db, args.timeout, sleep_s)), flush=True)
        if args.chains:
            print(json.dumps(latency(args.jobs, args.nodes, args.db, args.timeout, 0.0, args.chains)), flush=True)


if __name__ == "__main__":
    main()
