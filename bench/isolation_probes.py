"""Isolation probes: from inside tenant A's instance, try to reach what a renter must
never reach, and count the successes (target: 0).

Each probe is a shell command run in A's container the way a renter runs one (``exec``,
the same namespaces as an SSH session); it prints ``BREACH`` only if the forbidden thing
worked. Tenant B runs an instance beside it with a secret file, a marked process, a
listening port and a marked environment; the server's own process carries a canary
variable. ``tests/containers/test_container_isolation.py`` runs the same probes.

    python bench/isolation_probes.py [--json results.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CANARY = "SUANLI_SERVER_CANARY"
SECRET = "b-secret-7f3a"


@dataclass(frozen=True)
class Probe:
    name: str
    command: str
    attempts: int = 1  #: connections tried, for the network probes


@dataclass(frozen=True)
class Result:
    name: str
    breached: bool
    output: str


def host_addresses() -> list[str]:
    """Every IPv4 address of this host (the containers' gateways included)."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return [a for a in out if ":" not in a] + ["127.0.0.1"]


def listening_ports() -> list[int]:
    """TCP ports something on the host listens on (loopback or any address)."""
    out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
    ports = {int(line.split()[3].rsplit(":", 1)[1]) for line in out.splitlines() if line.split()}
    return sorted(ports)


def connect(targets: list[tuple[str, int]], timeout_s: float = 2.0) -> str:
    """A command that opens TCP connections to every target at once and prints ``BREACH``
    for each that is accepted (a dropped SYN waits out the timeout, so in parallel)."""
    script = (
        "import socket,select,sys,time\n"
        f"T={targets!r}\n"
        "socks={}\n"
        "for h,p in T:\n"
        " s=socket.socket(); s.setblocking(False); s.connect_ex((h,p)); socks[s]=(h,p)\n"
        f"end=time.time()+{timeout_s}\n"
        "while socks and time.time()<end:\n"
        " _,w,_=select.select([],list(socks),[],max(0,end-time.time()))\n"
        " for s in w:\n"
        "  if s.getsockopt(socket.SOL_SOCKET,socket.SO_ERROR)==0: print('BREACH',*socks[s])\n"
        "  del socks[s]\n"
    )
    return f"python3 - <<'EOF'\n{script}EOF"


def probes(f: dict[str, Any]) -> list[Probe]:
    """``f``: facts of the setup (paths, B's address and pid, host addresses and ports)."""
    # 127.0.0.1 in the container is its own loopback: skip the ports its own sshd and service use
    host_targets = [(h, p) for h in f["host_addresses"] for p in f["host_ports"] if not (h == "127.0.0.1" and p in (22, 8888))]
    return [
        Probe("read the server's data directory", f"ls {f['data_dir']} 2>/dev/null && echo BREACH"),
        Probe("read the admin token", f"cat {f['data_dir']}/admin-token 2>/dev/null && echo BREACH"),
        Probe("read the database", f"head -c 16 {f['data_dir']}/suanli.db 2>/dev/null && echo BREACH"),
        Probe("read B's disk on the host path", f"ls {f['b_disk']} 2>/dev/null && echo BREACH"),
        Probe("find B's files anywhere", f"find / -xdev -name '{SECRET}*' 2>/dev/null | grep -q . && echo BREACH"),
        Probe("see B's processes", "ps -eo args | grep -v grep | grep -q 'sleep 7777' && echo BREACH"),
        Probe(
            "read B's environment",
            f"cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -qx 'SUANLI_INSTANCE_ID={f['b_id']}' && echo BREACH",
        ),
        Probe("signal B's process by its host pid", f"kill -STOP {f['b_pid']} 2>/dev/null && echo BREACH"),
        Probe("reach B's container over the network", connect([(f["b_ip"], 8888)])),
        Probe(
            "reach B's published port on the host",
            connect([(h, f["b_host_port"]) for h in f["host_addresses"]]),
            len(f["host_addresses"]),
        ),
        Probe("reach the host's services", connect(host_targets), len(host_targets)),
        Probe(
            "read the server's environment",
            f"cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | "
            f"grep -q '{CANARY}' && echo BREACH; env | grep -q '{CANARY}' && echo BREACH",
        ),
        Probe("see the host's processes", "ps -eo args | grep -v grep | grep -q -E 'postgres|pytest|conmon' && echo BREACH"),
        Probe("mount a filesystem", "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m 2>/dev/null && echo BREACH"),
        Probe(
            "open a raw socket",
            "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)' 2>/dev/null && echo BREACH",
        ),
        Probe("create a device node", "mknod /tmp/sda b 8 0 2>/dev/null && echo BREACH"),
    ]


def run_probes(exec_a: Callable[[str], str], facts: dict[str, Any]) -> list[Result]:
    out = []
    for p in probes(facts):
        text = exec_a(p.command)
        out.append(Result(p.name, "BREACH" in text, text.strip()[-300:]))
    return out


def setup(srv: Any) -> tuple[Callable[[str], str], dict[str, Any], Callable[[], None]]:
    """Two tenants' instances on ``srv`` (tests/control/control_helpers.Server on the
    container runtime); returns A's exec, the facts, and a check that B is untouched."""

    def api(method: str, path: str, token: str | None = None, **kw: Any) -> Any:
        r = srv.http.request(method, path, headers={"Authorization": f"Bearer {token or srv.token}"}, **kw)
        assert r.status_code < 300, (path, r.text)
        return r.json()

    for t in ("tenant-a", "tenant-b"):
        api("POST", "/v1/tenants", json={"name": t})
        api("POST", "/v1/billing/topups", json={"tenant": t, "amount": "1000"})  # prepaid: a balance to rent with
    ta = api("POST", "/v1/users", json={"name": "a", "tenant": "tenant-a"})["token"]
    tb = api("POST", "/v1/users", json={"name": "b", "tenant": "tenant-b"})["token"]
    ids = {}
    for tok in (ta, tb):
        r = api("POST", "/v1/instances", tok, json={"gpu_milli": 500, "image": "python", "disk_gib": 1, "ports": [8888]})
        ids[tok] = r["id"]
    deadline = time.monotonic() + 90
    while any(api("GET", f"/v1/instances/{i}")["state"] != "running" for i in ids.values()):
        assert time.monotonic() < deadline, "instances did not start"
        time.sleep(0.2)

    def exec_in(tok: str, command: str) -> str:
        r = api("POST", f"/v1/instances/{ids[tok]}/exec", tok, json={"command": command, "timeout_s": 120})
        return r["output"]

    exec_in(
        tb,
        f"echo secret > /workspace/{SECRET}.txt; setsid sleep 7777 > /dev/null 2>&1 < /dev/null & "
        "setsid python3 -m http.server 8888 > /dev/null 2>&1 < /dev/null & sleep 0.5",
    )
    b_row = api("GET", f"/v1/instances/{ids[tb]}")
    local = srv.ctx.backends["local"]
    with srv.ctx.db.sessions() as s:
        from suanli.db.models import Instance

        handle = s.get(Instance, ids[tb]).handles[0]["data"]
    engine = local.containers.engine
    top = engine.cli("top", handle["name"], "hpid", "args").stdout.decode().splitlines()
    b_pid = next(int(line.split()[0]) for line in top[1:] if "sleep 7777" in line)
    facts = {
        "data_dir": str(srv.data_dir.resolve()),
        "b_disk": str((srv.data_dir / "disks" / f"instance-{ids[tb]}").resolve()),
        "b_id": ids[tb],
        "b_pid": b_pid,
        "b_ip": engine.address(handle["name"], handle["network"]),
        "b_host_port": handle["ports"]["8888"],
        "host_addresses": host_addresses(),
        "host_ports": listening_ports(),
        "b_instance": b_row,
    }

    def b_untouched() -> None:
        state = Path(f"/proc/{b_pid}/stat").read_text().split(") ")[1].split()[0]
        assert state != "T", "B's process was stopped"
        assert "secret" in exec_in(tb, f"cat /workspace/{SECRET}.txt")

    return (lambda c: exec_in(ta, c)), facts, b_untouched


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, help="append the results as one JSON line")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.control.control_helpers import release_host, start_server

    os.environ[CANARY] = "canary-" + socket.gethostname()
    tmp = Path(tempfile.mkdtemp(prefix="suanli-isolation-"))
    srv = start_server(tmp / "data", f"sqlite:///{tmp / 'suanli.db'}", runtime="container", allow_process_runtime=False)
    try:
        exec_a, facts, b_untouched = setup(srv)
        results = run_probes(exec_a, facts)
        b_untouched()
    finally:
        srv.close()
        release_host(srv.ctx.backends, tmp / "data")
        shutil.rmtree(tmp, ignore_errors=True)
    width = max(len(r.name) for r in results)
    for r in results:
        print(f"{r.name:<{width}}  {'BREACHED' if r.breached else 'refused'}")
    breaches = sum(r.breached for r in results)
    print(
        f"\n{len(results)} probes ({sum(p.attempts for p in probes(facts))} attempts), "
        f"{breaches} successes (target 0); host ports tried: {facts['host_ports']} on {facts['host_addresses']}"
    )
    if args.json:
        with open(args.json, "a") as f:
            f.write(
                json.dumps(
                    {
                        "bench": "isolation_probes",
                        "ts": time.time(),
                        "probes": len(results),
                        "breaches": breaches,
                        "results": [asdict(r) for r in results],
                    }
                )
                + "\n"
            )
    return 1 if breaches else 0


if __name__ == "__main__":
    raise SystemExit(main())
