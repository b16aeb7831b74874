"""Usage latency (issue 12): from a workload's end to its usage record in the API.

Starts a real ``suanli server`` (process runtime, default billing thread: every 10 s,
woken when work ends), launches N short jobs whose ends are spread over a few
seconds, and polls ``GET /v1/billing/usage`` every 0.1 s. A job's end is when its
process really ended: the mtime of the ``exit_code`` file its wrapper writes. Its
latency is the first poll that shows its GPU record, minus that end. docs/billing.md
promises 10 s.

    .venv/bin/python bench/usage_latency.py                      # 20 jobs, SQLite
    .venv/bin/python bench/usage_latency.py --db postgresql      # a fresh PostgreSQL database
    .venv/bin/python bench/usage_latency.py --jobs 20 --json out.json

``PYTHONPATH`` picks the code the server runs (``PYTHONPATH=$PWD/src`` for a worktree).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

TARGET_S = 10.0
PG_ADMIN = os.environ.get("SUANLI_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fresh_pg() -> tuple[str, str]:
    name = f"suanli_bench_usage_{uuid.uuid4().hex[:8]}"
    eng = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    eng.dispose()
    return PG_ADMIN.rsplit("/", 1)[0] + "/" + name, name


def drop_pg(name: str) -> None:
    eng = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    eng.dispose()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    ap.add_argument("--timeout", type=float, default=240.0, help="give up on a record after this many seconds")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="suanli-bench-usage-"))
    data = root / "data"
    pg_name = None
    db_args: list[str] = []
    if args.db == "postgresql":
        url, pg_name = fresh_pg()
        db_args = ["--db", url]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("SUANLI_DATA_DIR", "SUANLI_BILLING_INTERVAL_S")}
    server = [str(Path(sys.executable).parent / "suanli"), "server", "--port", str(port), "--proxy-port", str(free_port())]
    log = open(root / "server.log", "ab")
    proc = subprocess.Popen(
        [*server, "--data-dir", str(data), "--runtime", "process", *db_args],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"server did not start: {(root / 'server.log').read_text()[-2000:]}")
            time.sleep(0.2)
        token = (data / "admin-token").read_text().strip()
        http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        jobs: dict[int, float] = {}  # id -> its run's length
        for k in range(args.jobs):
            secs = 1.0 + 0.4 * k  # ends spread over the run, so the records do not all come in one run
            gpu = "A100-80G:1" if k % 3 == 0 else "H100:1"  # the demo inventory holds 8 + 16: all start at once
            r = http.post("/v1/jobs", json={"resources": {"accelerators": gpu}, "run": f"sleep {secs}"})
            r.raise_for_status()
            jobs[r.json()["id"]] = secs
        seen: dict[int, float] = {}
        t0 = time.monotonic()
        while len(seen) < len(jobs) and time.monotonic() - t0 < args.timeout:
            rows = http.get("/v1/billing/usage", params={"limit": 10000}).json()
            now = time.time()
            for u in rows:
                if u["kind"] == "gpu" and u["workload_kind"] == "job" and u["workload_id"] in jobs:
                    seen.setdefault(u["workload_id"], now)
            time.sleep(0.1)
        lat, billed_vs_ran = [], []
        for jid in jobs:
            code = data / "workloads" / f"job-{jid}-0" / "exit_code"
            if jid not in seen or not code.exists():
                continue
            lat.append(seen[jid] - code.stat().st_mtime)
        missing = len(jobs) - len(lat)
        states = {jid: http.get(f"/v1/jobs/{jid}").json()["state"] for jid in jobs}
        for u in http.get("/v1/billing/usage", params={"limit": 10000}).json():
            if u["kind"] == "gpu" and u["workload_kind"] == "job" and u["workload_id"] in jobs:
                billed_vs_ran.append(u["billed_seconds"] - jobs[u["workload_id"]])
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        if pg_name:
            drop_pg(pg_name)
    p50 = statistics.median(lat) if lat else float("nan")
    mx = max(lat) if lat else float("nan")
    out = {
        "jobs": len(jobs),
        "recorded": len(lat),
        "missing": missing,
        "states": sorted(set(states.values())),
        "db": args.db,
        "p50_s": round(p50, 3),
        "max_s": round(mx, 3),
        "min_s": round(min(lat), 3) if lat else None,
        "target_s": TARGET_S,
        "p50_over_target": round(p50 / TARGET_S, 3),
        "max_over_target": round(mx / TARGET_S, 3),
        "billed_minus_ran_s": [round(min(billed_vs_ran), 1), round(max(billed_vs_ran), 1)] if billed_vs_ran else None,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
    }
    print(
        f"usage latency over {len(lat)} of {len(jobs)} jobs ({args.db}): p50 {p50:.2f} s, max {mx:.2f} s "
        f"(target {TARGET_S:.0f} s: p50 x{p50 / TARGET_S:.2f}, max x{mx / TARGET_S:.2f})"
    )
    print(json.dumps(out))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
    return 0 if missing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
