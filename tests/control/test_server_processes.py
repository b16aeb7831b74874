"""``suanli server`` as the processes it runs (``api.supervisor``, ``api.parts``): a real
supervisor with a worker process and two API workers, on SQLite, the process runtime,
work in the operator's own tenant. What crosses processes is what is tested: wakes,
waiting reasons, a restarted worker, and the stop."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import httpx

from tests.control.control_helpers import ServerProcess, free_port, wait_until


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            kids.append(int(entry.name))
    return kids


def _descendants(pid: int) -> list[int]:
    out = []
    for kid in _children(pid):
        out += [kid, *_descendants(kid)]
    return out


def _comm(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def _part(supervisor: int, name: str) -> int | None:
    """The pid of the part named ``name`` (its process name is ``suanli-NAME``)."""
    found = [p for p in _children(supervisor) if _comm(p) == f"suanli-{name}"]
    return found[0] if len(found) == 1 else None


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _connections(pid: int, port: int) -> int:
    """Established TCP connections to local ``port`` that process ``pid`` holds."""
    inodes = set()
    for fd in (Path("/proc") / str(pid) / "fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    held = 0
    for table in ("tcp", "tcp6"):
        for line in (Path("/proc/net") / table).read_text().splitlines()[1:]:
            f = line.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == "01" and f[9] in inodes:  # 01: ESTABLISHED
                held += 1
    return held


def _job(http: httpx.Client, job_id: int) -> dict:
    r = http.get(f"/v1/jobs/{job_id}")
    assert r.status_code == 200, r.text
    return r.json()


def _until_state(http: httpx.Client, job_id: int, state: str, timeout_s: float = 60) -> dict:
    wait_until(lambda: _job(http, job_id)["state"] == state, timeout_s)
    return _job(http, job_id)


def test_the_server_runs_its_parts_apart_restarts_the_worker_and_stops_them_all(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", None, free_port(), args=("--workers", "2", "--runtime", "process"))
    srv.start()
    try:
        assert srv.proc is not None
        sup = srv.proc.pid
        worker = wait_until(lambda: _part(sup, "worker"), 30)
        assert _part(sup, "api-1") and _part(sup, "api-2") and _part(sup, "proxy"), [_comm(p) for p in _children(sup)]
        http = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {srv.token}"}, timeout=30)
        # 20 clients connecting at once, each keeping its connection: both API workers hold some
        # (on one shared socket the first to wake accepted the whole burst)
        burst = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(20)]
        try:
            for c in burst:
                c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert all(c.recv(12) == b"HTTP/1.1 200" for c in burst)
            held = {n: _connections(_part(sup, n), srv.port) for n in ("api-1", "api-2")}  # type: ignore[arg-type]
            assert sum(held.values()) >= 20 and all(held.values()), held
        finally:
            for c in burst:
                c.close()
        # the worker's loop ticks, and the API (another process) reads its counters
        first = wait_until(lambda: http.get("/healthz").json()["loop_ticks"], 60)
        assert wait_until(lambda: http.get("/healthz").json()["loop_ticks"] > first, 30)

        # /metrics, whichever API worker answers, counts every worker's requests, and the loop's ticks
        for _ in range(20):
            http.get("/healthz")
        for _ in range(3):
            text = http.get("/metrics").text
            served = [line for line in text.splitlines() if line.startswith("suanli_http_requests_total") and "/healthz" in line]
            assert served and float(served[0].split()[-1]) >= 22, served
            assert "\nsuanli_control_ticks " in text

        # a create wakes the worker's loop: scheduled and running
        blocker = http.post("/v1/jobs", json={"resources": {"accelerators": "Ascend-910B:8"}, "run": "sleep 300"})
        assert blocker.status_code == 201, blocker.text
        _until_state(http, blocker.json()["id"], "running")
        # an unplaceable job's waiting reason reaches the API
        waiting = http.post("/v1/jobs", json={"resources": {"accelerators": "Ascend-910B:1"}, "run": "true"}).json()
        wait_until(lambda: _job(http, waiting["id"])["waiting"]["code"] != "scheduling", 30)
        seen = _job(http, waiting["id"])
        assert seen["state"] == "queued" and seen["reason"] == "waiting for capacity (gpu)", seen
        assert seen["waiting"]["code"] == "capacity" and seen["waiting"]["since"], seen

        # kill -9 the worker: the supervisor starts another, which carries on
        os.kill(worker, signal.SIGKILL)
        restarted = wait_until(lambda: (w := _part(sup, "worker")) and w != worker and w, 30)
        assert restarted and "worker exited with code -9" in (srv.data_dir / "server.log").read_text()
        ticks = http.get("/healthz").json()["loop_ticks"]
        wait_until(lambda: (t := http.get("/healthz").json()["loop_ticks"]) is not None and t != ticks, 60)
        again = _job(http, waiting["id"])
        assert again["waiting"] == seen["waiting"], (again, seen)  # still waiting, since the same time
        assert http.post(f"/v1/jobs/{blocker.json()['id']}/cancel").status_code == 200
        _until_state(http, waiting["id"], "succeeded")

        # SIGTERM to the supervisor: every part, and the API's workers, exit
        family = _descendants(sup)
        assert len(family) >= 4, [_comm(p) for p in family]
        srv.proc.terminate()
        assert srv.proc.wait(60) == 0
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in family) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [_comm(p) for p in family if _alive(p)]
    finally:
        srv.close()


def test_a_part_that_cannot_start_stops_the_server_with_its_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        srv = ServerProcess(tmp_path / "data", None, port, args=("--workers", "1", "--runtime", "process"), port_tries=1)
        srv.data_dir.mkdir(parents=True)
        try:
            srv.start()
        except AssertionError as exc:
            assert f"the API cannot listen on 127.0.0.1:{port}" in str(exc), exc
        else:
            raise AssertionError("the server started on a port in use")
        assert srv.proc is not None and srv.proc.wait(30) != 0
