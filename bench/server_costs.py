"""The fixed CPU costs an in-process server puts on every test that builds one (issue 11:
the suite is CPU-bound on 2 cores, and hundreds of its tests each build a server).

    python bench/server_costs.py [--servers 10] [--ticks 200] [--processes 5 [--idle-s 60] [--compare SRC]]

Per server, CPU time of this process (``time.process_time``, every thread):

- ``build``: ``api.server.build`` on a migrated copy of the schema, as the tests do;
- ``idle tick``: one pass of the control loop with nothing to do, back to back, and
  ``idle tick, 0.25 s apart`` the same with the tests' interval slept between passes, as
  the loop's thread does: on this project's machines a pass after a quarter of a second
  asleep costs several times one back to back (caches gone cold), so the second is the
  one a waiting loop pays;
- ``first requests``: eight reads on a new app, against the same eight again on that app
  (the baseline, same run): the difference is what a new app pays once (route set-up).

With ``--processes N``: N starts of a real ``suanli server`` (the suite starts about
thirty), the CPU of the supervisor and its parts from launch until two seconds after
``/healthz`` first answers; with ``--idle-s S`` also each part's CPU over the next S
seconds with nothing to do (an operator's idle server). ``--compare SRC`` starts another
checkout's server in the same rounds, interleaved (the baseline).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.sqlite_helpers
os.environ.setdefault("SUANLI_RUNTIME", "process")

import httpx  # noqa: E402
import proc_cpu  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from suanli.api.app import create_app  # noqa: E402
from suanli.api.server import build  # noqa: E402
from tests.control.control_helpers import free_port, wait_until  # noqa: E402
from tests.sqlite_helpers import migrated_sqlite_url  # noqa: E402

#: passes timed 0.25 s apart per server (two seconds of sleep each)
APART_TICKS = 8
READS = ["/v1/me", "/v1/instances", "/v1/jobs", "/v1/gpus", "/v1/nodes", "/v1/events", "/v1/billing/prices", "/v1/images"]


def cpu_ms(work) -> float:  # type: ignore[no-untyped-def]
    t0 = time.process_time()
    work()
    return (time.process_time() - t0) * 1000


def one_server(ticks: int) -> dict[str, float]:
    data = Path(tempfile.mkdtemp(prefix="suanli-costs-")) / "data"
    data.mkdir()
    url = migrated_sqlite_url(data / "suanli.db")
    built: list = []
    out = {"build": cpu_ms(lambda: built.append(build(data, url, start_loop=False, interval_s=0.25)))}  # the tests' interval
    ctx, boot = built[0]
    assert ctx.loop is not None
    for _ in range(10):  # warm: the first passes compile the loop's statements
        ctx.loop.tick()
    out["idle tick"] = cpu_ms(lambda: [ctx.loop.tick() for _ in range(ticks)]) / ticks
    apart = 0.0
    for _ in range(APART_TICKS):
        time.sleep(0.25)
        apart += cpu_ms(ctx.loop.tick)
    out["idle tick, 0.25 s apart"] = apart / APART_TICKS
    # how long the loop sleeps after a pass with nothing to do (before 0918f4a: its interval)
    out["loop idle wait s"] = getattr(ctx.loop, "idle_wait_s", ctx.loop.interval_s)
    with TestClient(create_app(ctx)) as http:
        headers = {"Authorization": f"Bearer {boot.admin_token}"}

        def reads() -> None:
            for path in READS:
                assert http.get(path, headers=headers).status_code == 200, path

        out["first requests"] = cpu_ms(reads)
        out["same requests again"] = cpu_ms(reads)
    ctx.db.dispose()
    return out


def _tree_cpu_s(root: int) -> dict[str, float]:
    """CPU seconds of ``root`` and its children (the supervisor and its parts), by
    process title (``suanli-worker``, ``suanli-api-1``...)."""
    out: dict[str, float] = {}
    for pid, p in proc_cpu.processes().items():
        if pid == root or p.ppid == root:
            out[p.name] = out.get(p.name, 0.0) + p.cpu_s
    return out


def process_start(src: Path, idle_s: float) -> tuple[float, dict[str, float]]:
    """One ``suanli server`` (SQLite, process runtime) from ``src``: its CPU seconds to
    start, and each part's over ``idle_s`` seconds after."""
    data, port = Path(tempfile.mkdtemp(prefix="suanli-costs-")), free_port()
    main = "import sys; from suanli.cli import main; sys.argv[0] = 'suanli'; main()"
    args = ["server", "--data-dir", str(data), "--port", str(port), "--proxy-port", str(free_port()), "--runtime", "process"]
    proc = subprocess.Popen(
        [sys.executable, "-c", main, *args],
        env={**os.environ, "PYTHONPATH": str(src)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def answering() -> bool:
        if proc.poll() is not None:
            raise SystemExit(f"the server from {src} exited with code {proc.returncode}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(answering, 60)
        time.sleep(2)
        started = _tree_cpu_s(proc.pid)
        time.sleep(idle_s)
        later = _tree_cpu_s(proc.pid)
        return sum(started.values()), {k: v - started.get(k, 0.0) for k, v in later.items()}
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(data, ignore_errors=True)


def processes(n: int, compare: Path | None, idle_s: float) -> None:
    srcs = {"this checkout": Path(__file__).resolve().parents[1] / "src"}
    if compare:
        srcs[str(compare)] = compare.resolve()
    cpu: dict[str, list[float]] = {name: [] for name in srcs}
    idle: dict[str, list[dict[str, float]]] = {name: [] for name in srcs}
    for _ in range(n):
        for name, src in srcs.items():
            start, parts = process_start(src, idle_s)
            cpu[name].append(start)
            idle[name].append(parts)
    print(f"{n} server processes each, CPU s of the supervisor and its parts to start (median, min-max)")
    for name, values in cpu.items():
        print(f"  {name:40} {statistics.median(values):6.2f}  ({min(values):.2f}-{max(values):.2f})")
    if compare:
        mine, theirs = (statistics.median(v) for v in cpu.values())
        print(f"  this checkout / {compare}: {mine / theirs:.2f}x")
    if not idle_s:
        return
    print(f"idle, CPU s per minute by part (median, min-max), over {idle_s:.0f} s after the start")
    for name, runs in idle.items():
        per_min = {part: [r.get(part, 0.0) * 60 / idle_s for r in runs] for part in sorted({p for r in runs for p in r})}
        per_min["all"] = [sum(r.values()) * 60 / idle_s for r in runs]
        for part, values in per_min.items():
            print(f"  {name:40} {part:14} {statistics.median(values):6.2f}  ({min(values):.2f}-{max(values):.2f})")
    if compare:
        mine, theirs = (statistics.median(sum(r.values()) for r in runs) for runs in idle.values())
        print(f"  idle, this checkout / {compare}: {mine / theirs:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", type=int, default=10)
    ap.add_argument("--ticks", type=int, default=200)
    ap.add_argument("--processes", type=int, default=0, help="time N real server processes' starts instead")
    ap.add_argument("--compare", type=Path, help="another checkout's src, started in the same rounds (--processes)")
    ap.add_argument("--idle-s", type=float, default=0.0, help="also each part's CPU over this long idle (--processes)")
    args = ap.parse_args()
    if args.processes:
        processes(args.processes, args.compare, args.idle_s)
        return
    one_server(10)  # the process's first server: imports, the template database, caches
    runs = [one_server(args.ticks) for _ in range(args.servers)]
    wait_s = max(r.pop("loop idle wait s") for r in runs)
    print(f"{args.servers} servers after a first one, CPU ms (median, min-max), load {os.getloadavg()[0]:.1f}")
    for key in runs[0]:
        values = [r[key] for r in runs]
        print(f"  {key:22} {statistics.median(values):8.2f}  ({min(values):.2f}-{max(values):.2f})")
    first = statistics.median(r["first requests"] for r in runs)
    again = statistics.median(r["same requests again"] for r in runs)
    print(f"  first requests / the same again: {first / again:.2f}x")
    cold = statistics.median(r["idle tick, 0.25 s apart"] for r in runs)
    hot = statistics.median(r["idle tick"] for r in runs)
    print(f"  a pass 0.25 s apart / back to back: {cold / hot:.1f}x")
    print(f"  an idle loop (a pass every {wait_s} s) costs {cold / (wait_s * 1000) * 100:.1f} % of a core")


if __name__ == "__main__":
    main()
