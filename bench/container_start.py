"""Instance start latency: create -> running, -> first ``exec``, -> first SSH command,
on the container runtime against the process runtime, in the same run.

Two real ``suanli server`` processes run side by side on free ports, one with
``--runtime container`` (Podman, runc) and one with ``--runtime process`` (host
processes, no isolation), each on its own data directory and SQLite database. Each
round creates one instance on each (alternating which goes first) through the real
HTTP API, as the operator, with a key registered through ``POST /v1/keys`` (made by
``ssh-keygen``), and takes, from the moment the create request is sent:

- **running**: the first ``GET /v1/instances/ID`` that says ``running`` (polled every
  ``--poll`` s, so a figure is late by at most one poll);
- **exec**: the first ``POST /v1/instances/ID/exec`` of ``true`` that returns exit 0,
  tried from the moment it runs (both runtimes);
- **ssh**: the first plain OpenSSH ``ssh -i KEY ... true`` through the instance's
  ``ssh`` field that exits 0 (containers only: the process runtime has no SSH), tried in
  parallel with the exec probe.

The image is cached (built here by ``scripts/images`` or the server's first start); a
warm-up round (``--warmup``, default 1) is run first and reported apart, because the
first instance of a tenant also creates the tenant's network and its firewall rules.

    .venv/bin/python bench/container_start.py --rounds 10 --json bench/results/container_start.jsonl

Targets (issue 10): <= 3 s to running, <= 5 s to SSH-ready. The seed article (004)
reports 47 s cold start for its platform and 65-120 s for competitors.

``--profile`` adds a breakdown of a container start taken outside the server with the
same engine and the same kind of arguments (loop volume mkfs + mount, ``podman run``,
``podman inspect``, sshd accepting), so a miss can be placed.

On exit every instance is deleted, both servers stopped, and the host is released
(containers and networks of the data directories, loop-mounted volumes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.control.control_helpers import ServerProcess, free_port, release_host  # noqa: E402

SSH_OPTS = [
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "BatchMode=yes",
    "-o",
    "IdentitiesOnly=yes",
    "-o",
    "ConnectTimeout=5",
    "-o",
    "LogLevel=ERROR",
]
TARGETS = {"running": 3.0, "ssh": 5.0}
SEED_COLD_START_S = 47.0


# -- shared with bench/container_density.py ---------------------------------------------------
def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: every figure is one measured value)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(-(-q / 100 * len(ordered) // 1)) - 1))]


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def code_version() -> str:
    """The commit measured, ``+dirty`` when ``src/`` differs from it (results name their code)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "src"], cwd=ROOT).returncode != 0
    return (head or "unknown") + ("+dirty" if dirty else "")


class Api:
    """The HTTP API as the benchmark uses it (one keep-alive connection per thread)."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self._local = threading.local()

    @property
    def http(self) -> httpx.Client:
        c = getattr(self._local, "c", None)
        if c is None:
            c = self._local.c = httpx.Client(base_url=self.url, timeout=120, headers={"Authorization": f"Bearer {self.token}"})
        return c

    def call(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200, 201)) -> Any:
        r = self.http.request(method, path, json=body)
        if r.status_code not in ok:
            raise RuntimeError(f"{method} {path}: {r.status_code} {r.text[:500]}")
        return r.json() if r.content else None

    def instance(self, iid: int) -> dict | None:
        r = self.http.get(f"/v1/instances/{iid}")
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return r.json()


def start_server(tmp: Path, runtime: str) -> ServerProcess:
    args = ("--runtime", runtime) + (("--allow-process-runtime",) if runtime == "process" else ())
    return ServerProcess(tmp / runtime, None, free_port(), args=args).start()


def release(data_dir: Path) -> None:
    """Containers and networks of this data dir's runtime root, and its mounted volumes
    (what ``tests/control/control_helpers.release_host`` releases for the test suites)."""
    from suanli.backends.local import LocalBackend

    if not (data_dir / "workloads").exists():
        return
    try:
        backend = LocalBackend(data_dir / "workloads", "container")
    except Exception:  # no engine: nothing of ours in it
        backend = None
    release_host({"local": backend} if backend else {}, data_dir)


def leftovers(data_dir: Path) -> dict[str, list[str]]:
    """What of this data dir is still on the host: containers (running or not) of its
    runtime root, networks, mounts under it, loop devices backed by its files."""
    from suanli.backends.local.container_runtime import root_label

    root = str(data_dir.resolve())
    label = f"suanli.root={root_label((data_dir / 'workloads').resolve())}"
    out: dict[str, list[str]] = {}
    ps = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}"], capture_output=True, text=True
    )
    out["containers"] = ps.stdout.split()
    nets = subprocess.run(
        ["podman", "network", "ls", "--filter", f"label={label}", "--format", "{{.Name}}"], capture_output=True, text=True
    )
    out["networks"] = nets.stdout.split()
    with open("/proc/self/mounts") as f:
        out["mounts"] = [ln.split()[1] for ln in f if ln.split()[1].startswith(root + "/")]
    loops = subprocess.run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"], capture_output=True, text=True)
    out["loop_devices"] = [
        ln.split()[0] for ln in loops.stdout.splitlines() if len(ln.split()) > 1 and ln.split(None, 1)[1].startswith(root + "/")
    ]
    return out


def keypair(tmp: Path) -> tuple[Path, str]:
    key = tmp / "bench_key"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bench", "-f", str(key)], check=True)
    return key, (tmp / "bench_key.pub").read_text()


def ssh_once(inst: dict, key: Path, command: str = "true") -> int:
    argv = shlex.split(inst["ssh"]) + ["-i", str(key), *SSH_OPTS, command]
    try:
        return subprocess.run(argv, capture_output=True, timeout=30).returncode
    except subprocess.TimeoutExpired:
        return 255


def wait_for(probe: Callable[[], Any], timeout_s: float, every_s: float, what: str) -> Any:
    deadline = time.perf_counter() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.perf_counter() > deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(every_s)


def delete_and_wait(api: Api, iid: int, timeout_s: float = 120) -> None:
    api.call("DELETE", f"/v1/instances/{iid}", ok=(200, 404))
    wait_for(lambda: api.instance(iid) is None, timeout_s, 0.1, f"instance {iid} deleted")


# -- one round ------------------------------------------------------------------------------------
def one_start(api: Api, runtime: str, image: str, disk_gib: int, key: Path, poll_s: float) -> dict:
    """Create one instance and time running / exec / ssh from the create request."""
    body = {"gpu_model": "h100", "gpu_count": 1, "image": image, "disk_gib": disk_gib}
    t0 = time.perf_counter()
    iid = api.call("POST", "/v1/instances", body)["id"]
    t_created = time.perf_counter() - t0

    def running() -> dict | None:
        inst = api.instance(iid)
        if inst and inst["state"] == "failed":
            raise RuntimeError(f"instance {iid} failed: {inst}")
        return inst if inst and inst["state"] == "running" else None

    inst = wait_for(running, 60, poll_s, f"instance {iid} running")
    t_running = time.perf_counter() - t0
    result: dict[str, Any] = {
        "runtime": runtime,
        "id": iid,
        "created": t_created,
        "running": t_running,
        "instance_runtime": inst.get("runtime"),
        "ssh_field": inst.get("ssh"),
    }

    def exec_probe() -> None:
        def ok() -> bool:
            try:
                return api.call("POST", f"/v1/instances/{iid}/exec", {"command": "true", "timeout_s": 10})["exit_code"] == 0
            except RuntimeError:
                return False

        wait_for(ok, 60, poll_s, f"exec in {iid}")
        result["exec"] = time.perf_counter() - t0

    def ssh_probe() -> None:
        wait_for(lambda: ssh_once(inst, key) == 0, 60, poll_s, f"ssh into {iid}")
        result["ssh"] = time.perf_counter() - t0

    probes = [threading.Thread(target=exec_probe)]
    if runtime == "container":
        if not inst.get("ssh"):
            raise RuntimeError(f"container instance {iid} has no ssh field: {inst}")
        probes.append(threading.Thread(target=ssh_probe))
    for p in probes:
        p.start()
    for p in probes:
        p.join()
    for name in ("exec", "ssh") if runtime == "container" else ("exec",):
        if name not in result:
            raise RuntimeError(f"{runtime} instance {iid}: no successful {name}")
    delete_and_wait(api, iid)
    return result


# -- profile of one container start outside the server ------------------------------------------
@contextmanager
def stopwatch(rows: list[tuple[str, float]], what: str) -> Iterator[None]:
    t = time.perf_counter()
    yield
    rows.append((what, time.perf_counter() - t))


def profile(tmp: Path, image_ref: str, disk_gib: int) -> list[tuple[str, float]]:
    """The steps of a container start, each timed, with the same engine facts and the same
    kinds of arguments as ``container_runtime.submit`` (not the server's code path: the
    server's own total is the ``running`` figure)."""
    from suanli.backends.local import volumes
    from suanli.backends.local.engine import detect

    engine = detect("podman")
    assert engine is not None
    rows: list[tuple[str, float]] = []
    vol = tmp / "profile" / "vol"
    net = f"suanli-bench-profile-{os.getpid()}"
    name = f"suanli-bench-profile-{os.getpid()}"
    try:
        t = time.perf_counter()
        enforced = volumes.mount_sized(vol, disk_gib)
        rows.append(
            (f"volume: sparse {disk_gib} GiB file + mkfs.ext4 + loop mount (size enforced: {enforced})", time.perf_counter() - t)
        )
        with stopwatch(rows, "network: create (first instance of a tenant only)"):
            engine.ensure_network(net, {"suanli.bench": "profile"})
        with stopwatch(rows, "network: inspect (every later instance)"):
            engine.ensure_network(net, {"suanli.bench": "profile"})
        key = tmp / "profile" / "hostkey"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        (tmp / "profile" / "sshd_config").write_text(
            "Port 22\nHostKey /run/b/hostkey\nAuthorizedKeysFile /run/b/ak\nPasswordAuthentication no\nPidFile /run/sshd.pid\n"
        )
        (tmp / "profile" / "ak").write_text((tmp / "bench_key.pub").read_text())
        os.chmod(tmp / "profile", 0o755)
        script = "mkdir -p /run/sshd && /usr/sbin/sshd -f /run/b/sshd_config -e; while :; do sleep 86400; done"
        args = [
            "--name",
            name,
            "--init",
            "--network",
            net,
            "-p",
            "127.0.0.1::22",
            "--pids-limit",
            "4096",
            "--cpus",
            "16",
            "--memory",
            "16384m",
            "--memory-swap",
            "16384m",
            "--shm-size",
            "8192m",
            "--security-opt",
            "no-new-privileges",
            "--cap-drop",
            "NET_RAW",
            "-v",
            f"{vol}:/workspace",
            "-v",
            f"{tmp / 'profile'}:/run/b:ro",
            image_ref,
            "sh",
            "-c",
            script,
        ]
        with stopwatch(rows, "podman run -d (create + conmon + runc start; returns when started)"):
            engine.run(args)
        t = time.perf_counter()
        with stopwatch(rows, "podman inspect (published ports)"):
            port = engine.host_ports(name)["22"]
        inst = {"ssh": f"ssh -p {port} root@127.0.0.1"}
        wait_for(lambda: ssh_once(inst, tmp / "bench_key") == 0, 30, 0.02, "profile sshd")
        rows.append(("sshd up + first ssh 'true' (after run returned)", time.perf_counter() - t))
        with stopwatch(rows, "one more ssh 'true' (OpenSSH handshake + command, sshd warm)"):
            assert ssh_once(inst, tmp / "bench_key") == 0
        with stopwatch(rows, "podman exec true"):
            engine.exec(name, ["true"], 30)
        with stopwatch(rows, "podman ps -a (one reconcile look)"):
            engine.invalidate()
            engine.ps("suanli.bench=none")
        with stopwatch(rows, "podman rm -f (stop + remove)"):
            engine.remove(name)
        with stopwatch(rows, "volume: umount + delete"):
            volumes.remove(vol)
    finally:
        engine.remove(name)
        engine.cli("network", "rm", net, check=False)
        volumes.remove(vol)
    return rows


# -- report ------------------------------------------------------------------------------------------
def summary(rounds: list[dict], runtime: str, measure: str) -> tuple[float, float, float] | None:
    vals = [r[measure] for r in rounds if r["runtime"] == runtime and measure in r]
    return (statistics.median(vals), pct(vals, 90), max(vals)) if vals else None


def table(rounds: list[dict]) -> str:
    lines = [
        "| measure (from the create request) | container median / p90 / max s | process median / p90 / max s "
        "| ratio container/process (median) | target |",
        "|---|---:|---:|---:|---|",
    ]
    for measure, label in (
        ("running", "-> running"),
        ("exec", "-> first successful `instances exec`"),
        ("ssh", "-> first successful SSH command"),
    ):
        c, p = summary(rounds, "container", measure), summary(rounds, "process", measure)
        fmt = lambda s: f"{s[0]:.2f} / {s[1]:.2f} / {s[2]:.2f}" if s else "— (no SSH)"  # noqa: E731
        ratio = f"{c[0] / p[0]:.1f}x" if c and p else "—"
        target = TARGETS.get(measure)
        verdict = ""
        if target is not None and c:
            verdict = f"<= {target:g} s: {'met' if c[2] <= target else 'median met' if c[0] <= target else 'MISSED'}"
        lines.append(f"| {label} | {fmt(c)} | {fmt(p)} | {ratio} | {verdict} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=1, help="rounds run first and reported apart")
    ap.add_argument("--image", default="python", help="catalog image (needs sshd for the SSH figure)")
    ap.add_argument("--disk", type=int, default=50, help="disk GiB of each instance (the CLI's default: 50)")
    ap.add_argument("--poll", type=float, default=0.025, help="seconds between probes")
    ap.add_argument("--profile", action="store_true", help="also time the steps of one container start")
    ap.add_argument("--json", type=Path, default=None, help="append one JSON line with every figure here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (server logs)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="suanli-bench-start-"))
    os.chmod(tmp, 0o755)
    key, pub = keypair(tmp)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    load_before = load()
    code = code_version()  # at the start: the tree may change while it runs
    print(f"{started}  {load_before}", flush=True)
    servers: dict[str, ServerProcess] = {}
    warm: list[dict] = []
    rounds: list[dict] = []
    leaks: dict[str, dict] = {}
    prof: list[tuple[str, float]] = []
    try:
        for runtime in ("container", "process"):
            servers[runtime] = start_server(tmp, runtime)
        apis = {rt: Api(s.url, s.token) for rt, s in servers.items()}
        for rt, api in apis.items():
            api.call("POST", "/v1/keys", {"public_key": pub})
            names = [i["name"] for i in api.call("GET", "/v1/images")]
            if args.image not in names:
                raise SystemExit(f"image {args.image!r} not offered by the {rt} server: {names}")
        for n in range(args.warmup + args.rounds):
            order = ("container", "process") if n % 2 == 0 else ("process", "container")
            for rt in order:
                r = one_start(apis[rt], rt, args.image, args.disk, key, args.poll)
                r["round"] = n - args.warmup
                (warm if n < args.warmup else rounds).append(r)
                print(
                    f"round {r['round']:>3} {rt:<9} running {r['running']:.2f}s  exec {r['exec']:.2f}s"
                    + (f"  ssh {r['ssh']:.2f}s" if "ssh" in r else ""),
                    flush=True,
                )
        if args.profile:
            ref = next(i for i in apis["container"].call("GET", "/v1/images") if i["name"] == args.image)
            prof = profile(tmp, ref["ref"], args.disk)
    finally:
        for s in servers.values():
            s.stop()
        for rt, s in servers.items():
            release(s.data_dir)
            leaks[rt] = {k: v for k, v in leftovers(s.data_dir).items() if v}
        load_after = load()
        if not args.keep:
            subprocess.run(["rm", "-rf", str(tmp)], check=False)

    print()
    print(
        f"image {args.image} (cached), disk {args.disk} GiB, 1 x H100 (virtual), {args.rounds} rounds per runtime "
        f"after {args.warmup} warm-up; poll {args.poll * 1000:.0f} ms"
    )
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs; before: {load_before}; after: {load_after}")
    print()
    print(table(rounds))
    for r in warm:
        why = "first instance of the tenant: creates its network" if r["runtime"] == "container" else "first instance"
        print(
            f"warm-up ({r['runtime']}, {why}): running {r['running']:.2f}s, "
            f"exec {r['exec']:.2f}s" + (f", ssh {r['ssh']:.2f}s" if "ssh" in r else "")
        )
    print(f"seed article 004: {SEED_COLD_START_S:g} s cold start on its platform, 65-120 s for competitors")
    if prof:
        print("\nprofile of one container start outside the server (same engine facts):")
        for what, s in prof:
            print(f"  {s:6.3f} s  {what}")
    if any(leaks.values()):
        print(f"\nLEFT ON THE HOST: {leaks}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "a") as f:
            f.write(
                json.dumps(
                    {
                        "bench": "container_start",
                        "at": started,
                        "code": code,
                        "load_before": load_before,
                        "load_after": load_after,
                        "image": args.image,
                        "disk_gib": args.disk,
                        "rounds": rounds,
                        "warmup": warm,
                        "profile": prof,
                        "leaks": leaks,
                        "summary": {
                            rt: {m: summary(rounds, rt, m) for m in ("running", "exec", "ssh")} for rt in ("container", "process")
                        },
                    }
                )
                + "\n"
            )
    return 1 if any(leaks.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
