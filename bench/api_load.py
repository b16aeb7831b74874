"""Load benchmark of the control plane: instance create + list against a real
server process on PostgreSQL, with N concurrent clients (default 50).

Each client is a renter in its own tenant: it loops ``POST /v1/instances``
(a 0.1-GPU instance, so the scheduler places and launches most of them while
the benchmark runs) then ``GET /v1/instances`` (its own list). A baseline phase
hits ``GET /healthz`` with the same concurrency in the same run, so the figures
come with a ratio to the server's floor on this machine.

    .venv/bin/python bench/api_load.py                       # fresh PostgreSQL database
    .venv/bin/python bench/api_load.py --db sqlite           # the embedded database
    .venv/bin/python bench/api_load.py --clients 50 --seconds 20 --json out/api_load.json
    .venv/bin/python bench/api_load.py --audit-cost          # again with auditing off: its cost

Client and server share the machine's cores; the numbers are for the whole box.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
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

PG_ADMIN = os.environ.get("SUANLI_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


async def drive(url: str, tokens: list[str], seconds: float, ops: list[tuple[str, str, dict | None]]) -> dict:
    """Every client repeats ``ops`` until time is up; returns latencies by op."""
    lat: dict[str, list[float]] = {name: [] for name, _, _ in ops}
    errors = 0
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=len(tokens), max_keepalive_connections=len(tokens))
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:

        async def client(token: str) -> None:
            nonlocal errors
            headers = {"Authorization": f"Bearer {token}"}
            while time.perf_counter() < deadline:
                for name, method, body in ops:
                    t0 = time.perf_counter()
                    r = await http.request(
                        method, "/v1/instances" if name != "healthz" else "/healthz", json=body, headers=headers
                    )
                    lat[name].append(time.perf_counter() - t0)
                    if r.status_code >= 400:
                        errors += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(client(t) for t in tokens))
        wall = time.perf_counter() - t0
    n = sum(len(v) for v in lat.values())
    return {
        "requests": n,
        "errors": errors,
        "wall_s": round(wall, 2),
        "rps": round(n / wall, 1),
        "p50_ms": round(pct([x for v in lat.values() for x in v], 50) * 1000, 1),
        "p99_ms": round(pct([x for v in lat.values() for x in v], 99) * 1000, 1),
        "by_op": {
            name: {
                "count": len(v),
                "p50_ms": round(pct(v, 50) * 1000, 1),
                "p99_ms": round(pct(v, 99) * 1000, 1),
                "mean_ms": round(statistics.fmean(v) * 1000, 1) if v else None,
            }
            for name, v in lat.items()
        },
    }


def kill_run_tasks(workloads: Path) -> int:
    """SIGKILL every process the server started for this run, one by one: those whose
    environment carries ``SUANLI_TASK_DIR`` under ``workloads`` (the local backend sets
    it for each task, and everything a task starts inherits it). Nothing else is touched:
    a process that merely names the run's directory (``tail -f .../server.log`` in
    someone's shell) is not ours, nor is its process group. Returns how many were killed."""
    prefix = f"SUANLI_TASK_DIR={workloads}/".encode()
    killed: set[int] = set()
    for _ in range(100):  # again until a pass finds none: a task may fork while we kill
        found = 0
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) in killed:
                continue
            try:
                if any(e.startswith(prefix) for e in (proc / "environ").read_bytes().split(b"\0")):
                    os.kill(int(proc.name), signal.SIGKILL)
                    killed.add(int(proc.name))
                    found += 1
            except OSError:  # gone, or not ours to read
                continue
        if not found:
            break
        time.sleep(0.05)
    return len(killed)


def server_died(server: subprocess.Popen, log: Path) -> str | None:
    """Why the server is gone (exit code or signal, and its log's tail), or None if it runs."""
    try:
        code = server.wait(2)  # a killed process closes its sockets a moment before it can be reaped
    except subprocess.TimeoutExpired:
        return None
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    return f"the server {how} mid-run (pid {server.pid}); tail of {log}:\n" + log.read_text(errors="replace")[-2000:]


def make_users(url: str, admin: str, n: int) -> list[str]:
    tokens = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=30) as c:
        for i in range(n):
            c.post("/v1/tenants", json={"name": f"bench-{i}"}).raise_for_status()
            c.post("/v1/billing/topups", json={"tenant": f"bench-{i}", "amount": "1000"}).raise_for_status()  # prepaid
            r = c.post("/v1/users", json={"name": f"renter-{i}", "role": "member", "tenant": f"bench-{i}"})
            r.raise_for_status()
            tokens.append(r.json()["token"])
    return tokens


def fresh_db(kind: str, tmp: Path):  # type: ignore[no-untyped-def]
    """A database URL for one run, and how to drop it."""
    if kind == "postgresql":
        name = f"suanli_bench_{uuid.uuid4().hex[:8]}"
        admin_engine = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        with admin_engine.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))

        def drop() -> None:
            with admin_engine.connect() as c:
                c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

        return PG_ADMIN.rsplit("/", 1)[0] + "/" + name, drop
    if kind == "sqlite":
        return f"sqlite:///{tmp / 'suanli.db'}", None
    return kind, None


def one_run(args: argparse.Namespace, audit: bool) -> dict:
    """A fresh server and database; the healthz floor, then create+list."""
    tmp = Path(tempfile.mkdtemp(prefix="suanli-bench-"))
    db_url, drop = fresh_db(args.db, tmp)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp / "server.log", "wb")
    cmd = [sys.executable, "-m", "suanli.api", "--port", str(port), "--data-dir", str(tmp / "data"), "--db", db_url]
    server = subprocess.Popen(cmd + ([] if audit else ["--no-audit"]), stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            raise SystemExit("server did not start: " + (tmp / "server.log").read_text()[-2000:])
        admin = (tmp / "data" / "admin-token").read_text().strip()
        tokens = make_users(url, admin, args.clients)

        load_before = os.getloadavg()[0]
        create = {"gpu_milli": 100, "disk_gib": 1}  # the default image
        try:
            baseline = asyncio.run(drive(url, tokens, args.baseline_seconds, [("healthz", "GET", None)]))
            load = asyncio.run(drive(url, tokens, args.seconds, [("create", "POST", create), ("list", "GET", None)]))
        except httpx.TransportError:
            raise SystemExit(server_died(server, tmp / "server.log") or "the server stopped answering") from None
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=60) as c:
            rows = c.get("/v1/instances").json()
            audited = len(c.get("/v1/audit", params={"action": "instances.create", "limit": 1000}).json()) if audit else 0
        states: dict[str, int] = {}
        for r in rows:
            states[r["state"]] = states.get(r["state"], 0) + 1
        return {
            "db": "postgresql" if db_url.startswith("postgresql") else "sqlite",
            "audit": audit,
            "clients": args.clients,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "loadavg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "baseline_healthz": baseline,
            "create_list": load,
            "ratio_rps_vs_healthz": round(load["rps"] / baseline["rps"], 3) if baseline["rps"] else None,
            "instances_after": states,
            "audit_records_of_creates": audited,
        }
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        # the benchmark's instances are processes on this host, left running by design
        kill_run_tasks((tmp / "data" / "workloads").resolve())
        if drop is not None:
            drop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="postgresql", help="postgresql (a fresh database on the local server), sqlite, or a URL")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--baseline-seconds", type=float, default=8.0)
    ap.add_argument(
        "--audit-cost", action="store_true", help="also run with auditing off (--no-audit), same run: the audit log's cost"
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()

    result = one_run(args, audit=True)
    if args.audit_cost:
        off = one_run(args, audit=False)
        on_rps, off_rps = result["create_list"]["rps"], off["create_list"]["rps"]
        result = {
            "audit_on": result,
            "audit_off": off,
            "create_list_rps_on_vs_off": round(on_rps / off_rps, 3) if off_rps else None,
            "ratio_to_healthz_on_vs_off": [result["ratio_rps_vs_healthz"], off["ratio_rps_vs_healthz"]],
        }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
