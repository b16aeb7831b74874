"""Load time of the console's dashboard with 30 days of history: what the page asks for
when it opens (``GET /v1/dashboard?days=30``, the instance and job listings with each
row's latest metrics and cost, the alerts) and one workload's "Use" chart, on SQLite,
in-process (FastAPI's TestClient, no control loop), for N running instances of one tenant
holding an allocation each, with 30 days of one-minute metrics as the platform keeps
them (the last hour raw, one sample a minute; before that five-minute averages, which
retention and downsampling leave), and an hour's rated usage record per workload per day.

    PYTHONPATH=src .venv/bin/python bench/dashboard_load.py [--workloads 100] [--days 30] [--repeat 20]

Prints one JSON line: p50 and p95 of the page's requests together (sequential, as one
browser's first load would be a little better: it asks in parallel), of the dashboard
read alone, of a Use chart, and ``GET /healthz`` in the same run as the baseline; the
target is a page p95 under 1 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import insert, select

from suanli.api.app import create_app
from suanli.api.server import build
from suanli.billing.tables import Usage
from suanli.db.models import Allocation, Instance, Node, User, WorkloadMetric

DAY_S = 86_400


def _populate(ctx, workloads: int, days: int) -> None:  # type: ignore[no-untyped-def]
    now = time.time()
    with ctx.db.transaction() as s:
        user = s.scalars(select(User)).one()
        nodes = list(s.scalars(select(Node).where(Node.gpu_model == "H100")))
        ids = []
        for k in range(workloads):
            inst = Instance(tenant_id=user.tenant_id, user_id=user.id, name=f"w{k}", state="running", desired="running", gpu_models=["H100"], gpu_milli=100)  # fmt: skip
            s.add(inst)
            s.flush()
            ids.append(inst.id)
            node = nodes[k % len(nodes)]
            s.add(
                Allocation(
                    tenant_id=user.tenant_id, instance_id=inst.id, node_id=node.id, gpu_model="H100", gpu_indices=[k % 8 // 2],
                    milli_per_gpu=100, cpu_milli=100, memory_mib=100, priority="on-demand",
                )
            )  # fmt: skip
        tenant = user.tenant_id
    rows: list[dict] = []

    def flush(force: bool = False) -> None:
        if rows and (force or len(rows) >= 20_000):
            with ctx.db.transaction() as s:
                s.execute(insert(WorkloadMetric), rows)
            rows.clear()

    for wid in ids:
        for i in range(days * 288 - 12):  # five-minute buckets up to an hour ago
            rows.append(dict(kind="instance", workload_id=wid, tenant_id=tenant, ts=now - days * DAY_S + i * 300, resolution_s=300, samples=5, cpu_percent=40.0, memory_mib=900.0, gpu_note="not measured: virtual GPU"))  # fmt: skip
            flush()
        for i in range(60):  # the last hour raw
            rows.append(dict(kind="instance", workload_id=wid, tenant_id=tenant, ts=now - 3600 + i * 60, resolution_s=0, samples=1, cpu_percent=40.0, memory_mib=900.0, gpu_note="not measured: virtual GPU"))  # fmt: skip
            flush()
    flush(force=True)
    usage = []
    for wid in ids:
        for d in range(days):
            ms = int((now - (d + 1) * DAY_S) * 1000)
            usage.append(dict(kind="gpu", source_id=wid, period_ms=ms, tenant_id=tenant, workload_kind="instance", workload_id=wid, gpu_model="H100", plan="on-demand", start_ms=ms, end_ms=ms + 3_600_000, quantity=100, billed_seconds=3600, unit_price=19_070_000, amount=1_907_000, currency="CNY", price_version=1, run_id="bench"))  # fmt: skip
    with ctx.db.transaction() as s:
        s.execute(insert(Usage), usage)


def _p(values: list[float], q: float) -> float:
    return round(statistics.quantiles(values, n=100)[int(q) - 1] * 1000, 1) if len(values) > 1 else round(values[0] * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=100)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    ctx, boot = build(Path(tempfile.mkdtemp()) / "data", None, start_loop=False, runtime="process", allow_process_runtime=True)
    t0 = time.perf_counter()
    _populate(ctx, args.workloads, args.days)
    populate_s = time.perf_counter() - t0
    http = TestClient(create_app(ctx))
    http.__enter__()
    headers = {"Authorization": f"Bearer {boot.admin_token}"}
    page = [f"/v1/dashboard?days={args.days}", "/v1/instances", "/v1/jobs", "/v1/alerts"]

    def timed(paths: list[str]) -> float:
        t = time.perf_counter()
        for p in paths:
            r = http.get(p, headers=headers)
            assert r.status_code == 200, (p, r.status_code, r.text[:300])
        return time.perf_counter() - t

    timed(page + ["/healthz"])  # warm: routes set up, statements compiled
    with ctx.db.sessions() as s:
        metrics_rows = s.query(WorkloadMetric).count()
    since = time.time() - args.days * DAY_S
    use = [f"/v1/instances/1/metrics?since={since:.0f}"]
    runs = {"page": [], "dashboard": [], "use_30d": [], "healthz": []}
    for _ in range(args.repeat):
        runs["page"].append(timed(page))
        runs["dashboard"].append(timed(page[:1]))
        runs["use_30d"].append(timed(use))
        runs["healthz"].append(timed(["/healthz"]))
    out = {
        "workloads": args.workloads,
        "days": args.days,
        "metric_rows": metrics_rows,
        "populate_s": round(populate_s, 1),
        **{f"{k}_p50_ms": _p(v, 50) for k, v in runs.items()},
        **{f"{k}_p95_ms": _p(v, 95) for k, v in runs.items()},
    }
    out["page_p95_over_target"] = round(out["page_p95_ms"] / 1000, 3)
    out["page_p50_over_healthz_p50"] = round(out["page_p50_ms"] / max(out["healthz_p50_ms"], 0.1), 1)
    print(json.dumps(out))
    http.__exit__(None, None, None)


if __name__ == "__main__":
    main()
