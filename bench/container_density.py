"""Density: N concurrent small container instances on one host, all running, then all
removed, and nothing of them left behind.

A real ``suanli server --runtime container`` (Podman, runc) on a fresh data directory
with the demo inventory (virtual GPUs; every node is on this host's local backend).
``--count`` instances (default 50) of 0.1 GPU (``--gpu-milli 100`` on H100s: 16 GPUs x
10 slots fit 160), 0.1 CPU, 256 MiB, a 1 GiB disk, the ``tiny`` image, are created at
once (one thread per request, all released together) through the real HTTP API.
Measured from the first create request:

- **all running**: the first poll of ``GET /v1/instances`` where every one says
  ``running``; also each instance's own create -> running and the **time per
  container** (all running / count: the host's start throughput);
- the containers really up: ``podman ps`` of the server's runtime root counts ``count``
  running, and one ``podman exec`` in each sees its own ``/workspace`` mounted;
- the same count through plain ``podman run -d`` (``--baseline``: 1 and 4 at a time),
  the engine's floor on this host in the same run;

Then every instance is deleted at once and, once the API says all are gone, the
host is checked for leaks: no container of that runtime root in ``podman ps -a``, no
mount under the data directory, no loop device backed by its files, no disk file left
in ``disks/``, and every allocation released (``GET /v1/nodes``: ``gpus_free``,
per-GPU ``used_milli``, CPU and memory used back to the snapshot taken before). The
tenant network lives as long as the server (reused by the next instance); it is
checked after the server stops and the host is released. Exits 1 if anything leaked.

    .venv/bin/python bench/container_density.py --count 50 --json bench/results/container_density.jsonl
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from container_start import Api, code_version, leftovers, load, pct, release, start_server, wait_for  # noqa: E402

from suanli.backends.local.container_runtime import root_label  # noqa: E402


def allocation_view(api: Api) -> dict[str, dict]:
    """What the scheduler holds per node: whole GPUs free, milli used per GPU, CPU, memory."""
    return {
        n["name"]: {
            "gpus_free": n["gpus_free"],
            "cpu_used": n["cpu_used"],
            "mem_used": n["mem_used"],
            "used_milli": [g["used_milli"] for g in n["gpus"]],
        }
        for n in api.call("GET", "/v1/nodes")
    }


def running_containers(label: str) -> list[str]:
    done = subprocess.run(
        ["podman", "ps", "--filter", f"label={label}", "--filter", "status=running", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
    )
    return done.stdout.split()


def engine_baseline(image_ref: str, count: int, workers: int) -> dict:
    """Plain Podman, no Suanli: ``count`` containers of the same image started by
    ``workers`` parallel ``podman run -d`` (same engine facts: runc, lowered ulimits, a
    bridge network, 0.1 CPU, 256 MiB), wall time until all started, then removed. The
    engine's own floor on this host at this moment, to set Suanli's figure against."""
    from concurrent.futures import ThreadPoolExecutor

    from suanli.backends.local.engine import detect

    engine = detect("podman")
    assert engine is not None
    tag = f"suanli-bench-baseline-{os.getpid()}-{workers}"
    engine.ensure_network(tag, {"suanli.bench": tag})
    names = [f"{tag}-{i}" for i in range(count)]

    def run(name: str) -> None:
        engine.run(
            [
                "--name",
                name,
                "--label",
                f"suanli.bench={tag}",
                "--network",
                tag,
                "--init",
                "--cpus",
                "0.1",
                "--memory",
                "256m",
                "--pids-limit",
                "4096",
                image_ref,
                "sh",
                "-c",
                "while :; do sleep 86400; done",
            ]
        )

    try:
        t = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(run, names))
        started_s = time.perf_counter() - t
        t = time.perf_counter()
        engine.invalidate()
        engine.ps(f"suanli.bench={tag}")
        ps_s = time.perf_counter() - t
        t = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(engine.remove, names))
        removed_s = time.perf_counter() - t
    finally:
        for n in names:
            engine.remove(n)
        engine.cli("network", "rm", tag, check=False)
    return {
        "workers": workers,
        "started_s": started_s,
        "per_container_s": started_s / count,
        "ps_at_peak_s": ps_s,
        "removed_s": removed_s,
    }


def at_once(fn, items: list) -> list:  # type: ignore[no-untyped-def]
    """Run ``fn(item)`` for every item in its own thread, all released by one barrier."""
    barrier = threading.Barrier(len(items))
    out: list = [None] * len(items)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        barrier.wait()
        try:
            out[i] = fn(items[i])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--image", default="tiny")
    ap.add_argument("--gpu-model", default="h100")
    ap.add_argument("--gpu-milli", type=int, default=100)
    ap.add_argument("--cpus", type=float, default=0.1)
    ap.add_argument("--memory-gib", type=float, default=0.25)
    ap.add_argument("--disk", type=int, default=1, help="disk GiB of each instance (a loop-mounted ext4 each)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds allowed for all running / all gone")
    ap.add_argument("--baseline", default="1,4", help="plain-Podman baselines: parallel workers, comma-separated ('' for none)")
    ap.add_argument("--json", type=Path, default=None, help="append one JSON line with every figure here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (server log)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="suanli-bench-density-"))
    os.chmod(tmp, 0o755)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    load_before = load()
    code = code_version()  # at the start: the tree may change while it runs
    print(f"{started}  {load_before}", flush=True)
    server = start_server(tmp, "container")
    api = Api(server.url, server.token)
    label = f"suanli.root={root_label((server.data_dir / 'workloads').resolve())}"
    fig: dict = {}
    problems: list[str] = []
    ids: list[int] = []
    try:
        # one instance first, removed again: the tenant's network exists, as on a host in use
        body = {
            "gpu_model": args.gpu_model,
            "gpu_milli": args.gpu_milli,
            "cpus": args.cpus,
            "memory_gib": args.memory_gib,
            "image": args.image,
            "disk_gib": args.disk,
        }
        first = api.call("POST", "/v1/instances", body)["id"]
        wait_for(lambda: (i := api.instance(first)) and i["state"] == "running", 60, 0.1, "warm-up instance")
        api.call("DELETE", f"/v1/instances/{first}")
        wait_for(lambda: api.instance(first) is None, 60, 0.1, "warm-up instance gone")
        before = allocation_view(api)

        created_at: dict[int, float] = {}
        t0 = time.perf_counter()

        def create(_: int) -> int:
            iid = api.call("POST", "/v1/instances", body)["id"]
            created_at[iid] = time.perf_counter()
            return iid

        ids = at_once(create, list(range(args.count)))
        t_accepted = time.perf_counter() - t0
        running_at: dict[int, float] = {}

        def all_running() -> bool:
            now = time.perf_counter()
            rows = {i["id"]: i for i in api.call("GET", "/v1/instances") if i["id"] in set(ids)}
            for iid, row in rows.items():
                if row["state"] == "failed":
                    raise RuntimeError(f"instance {iid} failed: {row}")
                if row["state"] == "running":
                    running_at.setdefault(iid, now)
            return len(running_at) == len(ids)

        wait_for(all_running, args.timeout, 0.1, f"{args.count} instances running")
        t_all = time.perf_counter() - t0
        up = running_containers(label)
        per = sorted(running_at[i] - t0 for i in ids)
        own = [running_at[i] - created_at[i] for i in ids]

        # every container is a real one with its own /workspace mounted
        def probe(iid: int) -> bool:
            r = api.call(
                "POST",
                f"/v1/instances/{iid}/exec",
                {"command": "grep -q ' /workspace ' /proc/mounts && test -w /workspace", "timeout_s": 30},
            )
            return r["exit_code"] == 0

        t = time.perf_counter()
        subprocess.run(["podman", "ps", "-a", "--filter", f"label={label}", "--format", "json"], capture_output=True)
        fig["podman_ps_at_peak_s"] = time.perf_counter() - t
        t = time.perf_counter()
        probes_ok = sum(1 for i in ids if probe(i))
        t_probes = time.perf_counter() - t
        runtimes = {i["runtime"] for i in api.call("GET", "/v1/instances") if i["id"] in set(ids)}
        fig.update(
            {
                "count": args.count,
                "accepted_s": t_accepted,
                "all_running_s": t_all,
                "per_container_s": t_all / args.count,
                "first_running_s": per[0],
                "median_running_s": statistics.median(per),
                "own_create_to_running_median_s": statistics.median(own),
                "own_p90_s": pct(own, 90),
                "own_max_s": max(own),
                "podman_running": len(up),
                "exec_probes_ok": probes_ok,
                "exec_probes_s": t_probes,
                "runtimes": sorted(runtimes),
                "load_at_peak": load(),
            }
        )
        if len(up) != args.count:
            problems.append(f"podman shows {len(up)} running containers, expected {args.count}")
        if probes_ok != args.count:
            problems.append(f"only {probes_ok} of {args.count} containers see their /workspace")

        t1 = time.perf_counter()
        at_once(lambda iid: api.call("DELETE", f"/v1/instances/{iid}"), ids)
        wait_for(
            lambda: not [i for i in api.call("GET", "/v1/instances") if i["id"] in set(ids)],
            args.timeout,
            0.1,
            "all instances deleted",
        )
        fig["all_deleted_s"] = time.perf_counter() - t1
        fig["delete_per_container_s"] = fig["all_deleted_s"] / args.count
        left = {k: v for k, v in leftovers(server.data_dir).items() if v and k != "networks"}
        disks = sorted(p.name for p in (server.data_dir / "disks").iterdir()) if (server.data_dir / "disks").exists() else []
        if disks:
            left["disk_files"] = disks
        after = allocation_view(api)
        if after != before:
            left["allocations"] = [f"{n}: {before[n]} -> {after.get(n)}" for n in before if after.get(n) != before[n]]
        fig["leaks_while_serving"] = left
        if left:
            problems.append(f"left after rm (server still up): {left}")
        image_ref = next(i["ref"] for i in api.call("GET", "/v1/images") if i["name"] == args.image)
        fig["baselines"] = [engine_baseline(image_ref, args.count, int(w)) for w in args.baseline.split(",") if w.strip()]
    finally:
        if ids:  # an aborted run: delete what it made before the server stops
            for iid in ids:
                try:
                    api.call("DELETE", f"/v1/instances/{iid}", ok=(200, 404))
                except Exception:  # noqa: BLE001 - best effort, release() follows
                    pass
        server.stop()
        release(server.data_dir)
        final = {k: v for k, v in leftovers(server.data_dir).items() if v}
        fig["leaks_after_release"] = final
        if final:
            problems.append(f"left after the server stopped and the host was released: {final}")
        load_after = load()
        if not args.keep:
            subprocess.run(["rm", "-rf", str(tmp)], check=False)

    print()
    print(
        f"{args.count} instances at once: image {args.image}, {args.gpu_milli} milli-GPU ({args.gpu_model}, virtual), "
        f"{args.cpus:g} CPU, {args.memory_gib:g} GiB memory, {args.disk} GiB disk each"
    )
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs; before: {load_before}; at peak: {fig.get('load_at_peak')}; "
        f"after: {load_after}"
    )
    if "all_running_s" in fig:
        print(f"  all {args.count} create requests accepted:   {fig['accepted_s']:.2f} s")
        print(f"  first running:                      {fig['first_running_s']:.2f} s")
        print(
            f"  all running:                        {fig['all_running_s']:.2f} s  ({fig['per_container_s']:.3f} s per container)"
        )
        print(
            f"  each instance's create -> running:  median {fig['own_create_to_running_median_s']:.2f} s, "
            f"p90 {fig['own_p90_s']:.2f} s, max {fig['own_max_s']:.2f} s"
        )
        print(
            f"  podman: {fig['podman_running']} running; /workspace probe ok in {fig['exec_probes_ok']} "
            f"({fig['exec_probes_s']:.1f} s for {args.count} sequential exec); runtime {fig['runtimes']}"
        )
    if "all_deleted_s" in fig:
        print(
            f"  all deleted (rm at once -> API shows none): {fig['all_deleted_s']:.2f} s "
            f"({fig['delete_per_container_s']:.3f} s per container)"
        )
    if "podman_ps_at_peak_s" in fig:
        print(f"  one `podman ps -a` of the root with {args.count} up: {fig['podman_ps_at_peak_s']:.2f} s")
    for b in fig.get("baselines", []):
        print(
            f"  baseline, plain podman run -d x {args.count}, {b['workers']} at a time: all started {b['started_s']:.2f} s "
            f"({b['per_container_s']:.3f} s per container), ps {b['ps_at_peak_s']:.2f} s, rm all {b['removed_s']:.2f} s"
        )
    print(
        f"  leaks after rm: {fig.get('leaks_while_serving') or 'none'} (containers, mounts, loop devices, "
        f"disk files, allocations)"
    )
    print(f"  leaks after server stop + release: {fig.get('leaks_after_release') or 'none'} (also networks)")
    for p in problems:
        print(f"PROBLEM: {p}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "a") as f:
            f.write(
                json.dumps(
                    {
                        "bench": "container_density",
                        "at": started,
                        "code": code,
                        "load_before": load_before,
                        "load_after": load_after,
                        "args": {k: str(v) for k, v in vars(args).items()},
                        **fig,
                        "problems": problems,
                    }
                )
                + "\n"
            )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
