"""Start time of the ``suanli`` CLI as a whole process (issue 18, part 3).

    PYTHONPATH=src .venv/bin/python bench/cli_start.py [--runs 20]

Five commands people run all day -- ``--help``, ``gpus``, ``instances list``, ``jobs
list``, ``nodes list`` -- each started ``--runs`` times as a fresh process through the
installed ``suanli`` entry point, min and median wall time, against ``python -c pass``
(the interpreter's own start) and ``python -c "import httpx"`` (the floor of any command
that talks HTTP) measured in the same run, interleaved round by round so a noisy moment
hits every command alike. The commands that talk to the server run against a real
``suanli server`` subprocess the bench starts (SQLite, process runtime, its seeded nodes),
so each figure includes the request. The request alone (a fresh ``httpx`` client and
connection, as the CLI makes, from this warm process) is printed apart, so what is left
is start-up. Target: every command's median <= 0.3 s. ``--compare SRC`` adds each command
run with ``PYTHONPATH=SRC`` (another checkout's ``src``, e.g. the parent commit's), in the
same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

TARGET_S = 0.3
COMMANDS: list[tuple[str, ...]] = [("--help",), ("gpus",), ("instances", "list"), ("jobs", "list"), ("nodes", "list")]
#: the endpoint each server-talking command reads (for the request-alone figure)
ENDPOINTS = {"gpus": "/v1/gpus", "instances list": "/v1/instances", "jobs list": "/v1/jobs", "nodes list": "/v1/nodes"}


def entry_point() -> list[str]:
    """The installed ``suanli`` script next to this interpreter (what a user runs), else ``-c``."""
    script = Path(sys.executable).parent / "suanli"
    if script.exists():
        return [str(script)]
    found = shutil.which("suanli")
    return [found] if found else [sys.executable, "-c", "from suanli.cli import main; main()"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(tmp: Path) -> tuple[subprocess.Popen, str, str]:
    """A real ``suanli server`` on a free port; its URL and admin token once it answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp / "server.log", "wb")  # noqa: SIM115 -- the server holds it for its lifetime
    cmd = [*entry_point(), "server", "--port", str(port), "--proxy-port", str(free_port())]
    cmd += ["--data-dir", str(tmp / "data"), "--runtime", "process"]
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit("the server exited: " + (tmp / "server.log").read_text(errors="replace")[-2000:])
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return server, url, (tmp / "data" / "admin-token").read_text().strip()
        except httpx.TransportError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("the server did not answer in 120 s: " + (tmp / "server.log").read_text(errors="replace")[-2000:])


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds from spawn to exit of one process (it must exit 0), and its CPU seconds:
    on a loaded machine wall time mostly measures the neighbours, CPU time still the command."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    took = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv} exited {done.returncode}: {done.stderr.decode(errors='replace')[-1000:]}")
    return took, r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime


def request_alone(url: str, token: str, path: str, runs: int) -> float:
    """Median seconds of one GET with a fresh client and connection, as one CLI command makes."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        with httpx.Client(base_url=url, timeout=60) as c:
            c.get(path, headers={"Authorization": f"Bearer {token}"}).raise_for_status()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--compare", type=Path, help="another checkout's src: its commands run in the same rounds")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="suanli-cli-start-"))
    server, url, token = start_server(tmp)
    env = {**os.environ, "SUANLI_URL": url, "SUANLI_TOKEN": token, "SUANLI_CONFIG": str(tmp / "no-config.json")}
    env["COLUMNS"] = "200"
    py = sys.executable
    cases: dict[str, list[str]] = {"python -c pass": [py, "-c", "pass"], "python -c 'import httpx'": [py, "-c", "import httpx"]}
    cases |= {"suanli " + " ".join(c): [*entry_point(), *c] for c in COMMANDS}
    envs = {name: env for name in cases}
    if args.compare:
        for c in COMMANDS:
            name = f"{args.compare}: suanli " + " ".join(c)
            cases[name] = [*entry_point(), *c]
            envs[name] = {**env, "PYTHONPATH": str(args.compare.resolve())}
    times: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    try:
        for name, argv in cases.items():  # one warm-up each: page cache and .pyc files, not measured
            timed(argv, envs[name])
        for _ in range(args.runs):
            for name, argv in cases.items():
                wall, used = timed(argv, envs[name])
                times[name].append(wall)
                cpu[name].append(used)
        alone = {name: request_alone(url, token, path, args.runs) for name, path in ENDPOINTS.items()}
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    base = statistics.median(times["python -c pass"])
    load = os.getloadavg()[0]
    print(f"{args.runs} runs each, interleaved; load average {load:.2f}; python {sys.version.split()[0]}")
    print("\n| process | min s | median s | x python -c pass | CPU median s | request alone s | target <= 0.3 s |")
    print("|---|---:|---:|---:|---:|---:|---|")
    rows = []
    for name, ts in times.items():
        med = statistics.median(ts)
        cmd = name.split("suanli ", 1)[-1]
        req = alone.get(cmd)
        verdict = ("met" if med <= TARGET_S else "MISSED") if name.startswith("suanli") else ""
        used = statistics.median(cpu[name])
        row = {"process": name, "min_s": round(min(ts), 3), "median_s": round(med, 3), "ratio": round(med / base, 2)}
        rows.append({**row, "cpu_median_s": round(used, 3)})
        alone_s = "" if req is None else f"{req:.3f}"
        print(f"| `{name}` | {min(ts):.3f} | {med:.3f} | {med / base:.2f} | {used:.3f} | {alone_s} | {verdict} |")
    print(json.dumps({"runs": args.runs, "load": round(load, 2), "rows": rows}))


if __name__ == "__main__":
    main()
