"""Latency of the listings renters read, one client: ``GET /v1/instances`` (with each
row's cost so far and rate now, ``billing.workload_cost``) and ``GET /v1/gpus`` (with
the prices now, ``billing.offers``), in-process (FastAPI's TestClient, no control loop)
on SQLite, for a list of N running instances of one tenant, each holding an allocation,
half-way through a rating period after a rating run.

    PYTHONPATH=src .venv/bin/python bench/listing_latency.py [--rows 1,100] [--repeat 30]

Run it with ``PYTHONPATH`` pointing at another checkout's ``src`` to compare (the
figures in BENCHMARKS.md are this commit against its parent branch point). Prints one
JSON line per (path, rows): median and 10th-percentile milliseconds.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import select

from suanli.api.app import create_app
from suanli.api.server import build
from suanli.billing import rater
from suanli.billing.store import ms_to_dt, now_ms
from suanli.db.models import Allocation, Instance, Node, User


def measure(rows: int, repeat: int) -> list[dict]:
    ctx, boot = build(Path(tempfile.mkdtemp()) / "data", None, start_loop=False, runtime="process", allow_process_runtime=True)
    http = TestClient(create_app(ctx))
    headers = {"Authorization": f"Bearer {boot.admin_token}"}
    now = now_ms()
    started = ms_to_dt(now - 3 * 3_600_000 - 1_800_000)
    with ctx.db.transaction() as s:
        user = s.scalars(select(User)).one()
        node = s.scalars(select(Node).where(Node.gpu_model == "H100")).first()
        assert node is not None
        for k in range(rows):
            inst = Instance(
                tenant_id=user.tenant_id,
                user_id=user.id,
                name=f"i{k}",
                state="running",
                desired="running",
                disk_gib=50,
                gpu_models=["H100"],
                gpu_count=1,
                image="python",
                created_at=started,
                updated_at=started,
            )
            s.add(inst)
            s.flush()
            s.add(
                Allocation(
                    tenant_id=user.tenant_id,
                    node_id=node.id,
                    instance_id=inst.id,
                    gpu_model="H100",
                    gpu_indices=[k % 8],
                    milli_per_gpu=10,
                    cpu_milli=1,
                    memory_mib=1,
                    priority="on-demand",
                    started_at=started,
                )
            )
    rater.run(ctx.db, cutoff_ms=now - 60_000)
    out = []
    for path in ("/v1/instances", "/v1/gpus"):
        n = len(http.get(path, headers=headers).json())
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            http.get(path, headers=headers).raise_for_status()
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        out.append(
            {"path": path, "rows": n, "median_ms": round(times[len(times) // 2], 1), "p10_ms": round(times[len(times) // 10], 1)}
        )
    http.close()
    ctx.db.dispose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,100", help="list lengths, comma-separated")
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    for rows in (int(r) for r in args.rows.split(",")):
        for line in measure(rows, args.repeat):
            print(json.dumps(line))


if __name__ == "__main__":
    main()
