"""What one API request costs the server, without the load: database statements and CPU
time per request of ``POST /v1/instances``, ``GET /v1/instances`` (a renter's 40: ``list``
the page asked again, kept a few seconds, ``list_computed`` computed, as the first time
or after a change; ``api.page_cache``), ``GET /healthz`` and the audit record a create
leaves (``audit_write``: ``control.audit.write`` alone), the app in-process
(``api.server.build``, the control loop off), each as a ratio to the health check
measured in the same run. ``bench/api_load.py`` measures the same requests under load;
this one says where a change moved them, on a loaded machine too (statement counts do
not depend on the load, CPU time less than wall time).

    .venv/bin/python bench/api_request_cost.py                 # SQLite
    .venv/bin/python bench/api_request_cost.py --db postgresql # a fresh database on the local server
    .venv/bin/python bench/api_request_cost.py --price-versions 300  # after 300 price changes, a day apart
    .venv/bin/python bench/api_request_cost.py --db postgresql --reads  # and every read endpoint's statements

``--reads`` also counts the statements of each ``GET`` a renter and an operator make
(issue 18: "handlers that only read do one or two indexed queries"), with the renter's 40
instances and a job: the first request and the same request again (a list page is kept,
``api.page_cache``; the others are computed each time).

``--price-versions N`` first changes a price N times, a day apart in the past (as an
operator changing prices daily for N days would have), and rates once, so the unrated
period starts now as the billing worker keeps it on a running platform.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, text

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ROWS = 40
DAY_MS = 86_400_000
#: an audit record as a renter's create leaves it
AUDITED = {
    "actor": "renter",
    "action": "instances.create",
    "object": "instance/7",
    "result": "201",
    "tenant_id": 1,
    "detail": {"method": "POST", "path": "/v1/instances", "route": "/v1/instances"},
}


def measure(call: Callable[[], object], n: int, count: dict) -> dict:
    """Median wall ms, mean CPU ms (this process: the app's threads and the test client)
    and statements per call."""
    walls, stmts = [], []
    cpu0 = time.process_time()
    for _ in range(n):
        count["n"] = 0
        t0 = time.perf_counter()
        call()
        walls.append(time.perf_counter() - t0)
        stmts.append(count["n"])
    cpu = (time.process_time() - cpu0) / n
    return {
        "wall_ms_median": round(statistics.median(walls) * 1000, 2),
        "cpu_ms": round(cpu * 1000, 2),
        "statements": statistics.median(stmts),
    }


#: what a renter reads (``{i}``: one of its instances, ``{j}``: its job), then an operator
RENTER_READS = [
    "/v1/instances", "/v1/instances/{i}", "/v1/instances/{i}/metrics", "/v1/jobs", "/v1/jobs/{j}",
    "/v1/jobs/{j}/metrics", "/v1/gpus", "/v1/images", "/v1/keys", "/v1/me", "/v1/tokens", "/v1/alerts",
    "/v1/dashboard", "/v1/billing/usage", "/v1/billing/bill", "/v1/billing/terms", "/v1/billing/prices",
    "/v1/billing/grants", "/v1/billing/subscriptions", "/v1/billing/budget/changes",
]  # fmt: skip
OPERATOR_READS = [
    "/v1/instances", "/v1/jobs", "/v1/nodes", "/v1/events", "/v1/users", "/v1/tenants", "/v1/audit",
    "/v1/dashboard", "/v1/billing/bill?tenant=bench", "/v1/billing/terms?tenant=bench",
]  # fmt: skip


def read_statements(http: Any, renter: dict, admin: dict, count: dict) -> list[dict]:
    """Statements of each read endpoint, asked twice (``--reads``)."""
    instance = http.get("/v1/instances", headers=renter).json()[0]["id"]
    r = http.post("/v1/jobs", json={"name": "bench", "run": "true"}, headers=renter)
    r.raise_for_status()
    out = []
    for who, headers, paths in (("renter", renter, RENTER_READS), ("operator", admin, OPERATOR_READS)):
        for path in paths:
            url = path.format(i=instance, j=r.json()["id"])
            n = []
            for _ in range(2):
                count["n"] = 0
                status = http.get(url, headers=headers).status_code
                n.append(count["n"])
            out.append({"who": who, "path": path, "status": status, "first": n[0], "again": n[1]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="sqlite", choices=["sqlite", "postgresql"])
    ap.add_argument(
        "--where", action="store_true", help="also print which code issued each statement of one computed list and one create"
    )
    ap.add_argument("--price-versions", type=int, default=0, help="price changes made first, a day apart in the past")
    ap.add_argument("--reads", action="store_true", help="also count the statements of every read endpoint")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from fastapi.testclient import TestClient

    from suanli.api.app import create_app
    from suanli.api.server import build
    from suanli.control import audit

    tmp = Path(tempfile.mkdtemp(prefix="suanli-cost-"))
    url, drop = None, None
    if args.db == "postgresql":
        name = f"suanli_cost_{uuid.uuid4().hex[:8]}"
        admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
        url = PG_ADMIN.rsplit("/", 1)[0] + "/" + name

        def drop() -> None:
            with admin.connect() as c:
                c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    try:
        ctx, boot = build(tmp / "data", url, start_loop=False, runtime="process", allow_process_runtime=True)
        count = {"n": 0}
        where: Counter[str] = Counter()

        def on_statement(*_: object) -> None:
            count["n"] += 1
            if args.where and count.get("trace"):
                frames = [f for f in traceback.extract_stack() if "/suanli/" in f.filename and "/db/session.py" not in f.filename]
                where[" < ".join(f"{Path(f.filename).stem}.{f.name}" for f in reversed(frames[-3:]))] += 1

        event.listen(ctx.db.engine, "before_cursor_execute", on_statement)
        with TestClient(create_app(ctx)) as http:
            admin_h = {"Authorization": f"Bearer {boot.admin_token}"}
            http.post("/v1/tenants", json={"name": "bench"}, headers=admin_h).raise_for_status()
            http.post("/v1/billing/topups", json={"tenant": "bench", "amount": "1000"}, headers=admin_h).raise_for_status()
            if args.price_versions:
                from suanli.billing import rater, store

                start = store.now_ms() - args.price_versions * DAY_MS
                for i in range(args.price_versions):
                    store.set_price(ctx.db, "bench", None, "storage", f"0.1{i % 7}", effective_ms=start + i * DAY_MS)
                rater.run(ctx.db)
            r = http.post("/v1/users", json={"name": "renter", "role": "member", "tenant": "bench"}, headers=admin_h)
            renter = {"Authorization": f"Bearer {r.json()['token']}"}

            audited = audit.Entry(**AUDITED)

            def create() -> None:
                assert http.post("/v1/instances", json={"gpu_milli": 100, "disk_gib": 1}, headers=renter).status_code == 201

            def list_() -> None:
                assert len(http.get("/v1/instances", headers=renter).json()) == ROWS

            def list_computed() -> None:  # the page computed, not kept (api.page_cache)
                ctx.pages.clear()
                list_()

            out = {
                "db": args.db,
                "price_versions": args.price_versions + 1,
                "create": measure(create, ROWS, count),
                "list": measure(list_, ROWS, count),
                "list_computed": measure(list_computed, ROWS, count),
                "healthz": measure(lambda: http.get("/healthz"), 200, count),
                # the record each create's audit middleware writes, alone (``control.audit.write``)
                "audit_write": measure(lambda: audit.write(ctx.db, audited), 300, count),
            }
            if args.reads:
                out["reads"] = read_statements(http, renter, admin_h, count)
            if args.where:
                count["trace"] = 1
                for op, call in (("list_computed", list_computed), ("create", create)):
                    where.clear()
                    call()
                    out[f"{op}_statements_by_caller"] = dict(where.most_common())
        ctx.db.dispose()
    finally:
        if drop is not None:
            drop()
    base = out["healthz"]
    for op in ("create", "list", "list_computed", "audit_write"):
        out[op]["cpu_vs_healthz"] = round(out[op]["cpu_ms"] / base["cpu_ms"], 1) if base["cpu_ms"] else None
    print(f"{'request':<14}{'statements':>11}{'CPU ms':>9}{'wall ms p50':>13}{'CPU x healthz':>15}")
    for op in ("healthz", "list", "list_computed", "create", "audit_write"):
        m = out[op]
        print(f"{op:<14}{m['statements']:>11}{m['cpu_ms']:>9}{m['wall_ms_median']:>13}{m.get('cpu_vs_healthz', 1):>15}")
    if "reads" in out:
        print(f"{'who':<9}{'GET':<34}{'status':>7}{'first':>7}{'again':>7}")
        for r in out["reads"]:
            print(f"{r['who']:<9}{r['path']:<34}{r['status']:>7}{r['first']:>7}{r['again']:>7}")
    for op in ("list_computed", "create"):
        if f"{op}_statements_by_caller" in out:
            print(f"{op}, statements by caller:")
            for k, v in out[f"{op}_statements_by_caller"].items():
                print(f"  {v:>3} {k}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
