"""Idle auto-stop with real containers: an idle instance is stopped within its window +
one collection interval; one whose CPU is busy, one with an SSH session open, and one with
a connection open to a published port (what the port proxy holds) are never stopped. The metrics thread samples them with one ``podman stats`` call per
interval and reads SSH sessions from each container's own TCP table."""

from __future__ import annotations

import shlex
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from suanli.control.autostop import AutostopSettings
from suanli.control.metrics import MetricsSettings
from tests.containers.container_helpers import make_server
from tests.containers.test_container_lifecycle import run
from tests.containers.test_container_ssh import OPTS, add_key, ssh_ready, user
from tests.control.control_helpers import Server, wait_state, wait_until
from tests.event_helpers import events_text
from tests.metrics.autostop_helpers import Timeline

WINDOW_S = 8
INTERVAL_S = 2.0
NOTICE_S = 3.0


@pytest.fixture
def asrv(images: list[str], tmp_path: Path) -> Iterator[Server]:
    (tmp_path / "data").mkdir()
    srv = make_server(
        tmp_path / "data",
        metrics=MetricsSettings(interval_s=INTERVAL_S),
        # the operator's minimum lowered for the test; the CPU threshold at 2 % of a core, not 5 %,
        # because CI machines run many suites at once (a load of 10 on 2 cores was measured
        # here: a spinning shell then gets 7 % of a core). An idle container reads 0.0.
        autostop=AutostopSettings(min_s=5, notice_s=NOTICE_S, cpu_percent=2.0),
    )
    try:
        yield srv
    finally:
        srv.close()


def _create(srv: Server, token: str | None = None, **body: object) -> dict:
    body = {"gpu_model": "h100", "gpu_count": 1, "image": "tiny", "disk_gib": 1, "autostop_s": WINDOW_S, **body}
    r = srv.post("/v1/instances", body, token=token)
    assert r.status_code == 201, r.text
    return wait_state(srv, "instance", r.json()["id"], ("running", "failed"), 90)


def test_idle_stopped_within_window_busy_and_ssh_held_never(asrv: Server, keypair) -> None:  # type: ignore[no-untyped-def]
    alice = user(asrv, "alice", "lab")
    key, public = keypair("alice")
    add_key(asrv, alice, public)
    idle = _create(asrv, token=alice)
    busy = _create(asrv, token=alice)
    held = _create(asrv, token=alice, image="python")
    served = _create(asrv, token=alice, image="python", ports=[8000])
    assert [i["state"] for i in (idle, busy, held, served)] == ["running"] * 4, (idle, busy, held, served)
    code, out = run(asrv, served, "python3 -m http.server 8000 </dev/null >/dev/null 2>&1 &", token=alice)
    assert code == 0, out
    host_port = asrv.ctx.backends["local"].list_running()  # the published port on loopback (the proxy's upstream)
    (handle,) = [h for h in host_port if h.key == f"instance-{served['id']}"]
    upstream = wait_until(lambda: _connect(int(handle.data["ports"]["8000"])), 20)
    # Busy about a tenth to a fifth of a core, far above the threshold: a spinner held a
    # whole core for the test's half-minute in a suite that is CPU-bound (issue 11).
    spin = "while :; do i=0; while [ $i -lt 10000 ]; do i=$((i + 1)); done; sleep 0.1; done"
    code, out = run(asrv, busy, f"sh -c '{spin}' </dev/null >/dev/null 2>&1 &", token=alice)
    assert code == 0, out
    assert ssh_ready(held, key).returncode == 0
    session = subprocess.Popen(
        shlex.split(held["ssh"]) + ["-i", str(key), *OPTS, "sleep 300"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        timeline = Timeline.record(asrv)
        assert asrv.ctx.metrics is not None
        asrv.ctx.metrics.start()  # only now: the busy one must not be judged before its spinner runs
        started = time.time()
        wait_state(asrv, "instance", idle["id"], ("stopping", "stopped"), WINDOW_S + 30)
        events = timeline.assert_stopped_in_time(asrv, idle["id"], WINDOW_S, NOTICE_S)
        assert "noticed" in [e["to_state"] for e in events], events_text(events)
        wait_state(asrv, "instance", idle["id"], ("stopped",), 30)
        # the others stay through two more windows after the idle one stopped
        deadline = max(time.time(), started + WINDOW_S) + WINDOW_S + 2 * INTERVAL_S
        while time.time() < deadline:
            for inst in (busy, held, served):
                now = asrv.get(f"/v1/instances/{inst['id']}")
                ev = asrv.get(f"/v1/events?kind=instance&object_id={inst['id']}")
                assert now["state"] == "running" and now["notice"] is None, (inst["id"], now["metrics"], events_text(ev))
            time.sleep(1.0)
        m_busy = asrv.get(f"/v1/instances/{busy['id']}")["metrics"]
        m_held = asrv.get(f"/v1/instances/{held['id']}")["metrics"]
        assert m_busy["cpu_percent"] > 2 and m_busy["gpu_util_percent"] is None, m_busy
        assert m_held["sessions"] >= 1, m_held
        m_served = asrv.get(f"/v1/instances/{served['id']}")["metrics"]
        assert m_served["sessions"] == 1, m_served
    finally:
        session.kill()
        session.wait()
        upstream.close()


def _connect(port: int) -> socket.socket | None:
    try:
        return socket.create_connection(("127.0.0.1", port), timeout=2)
    except OSError:
        return None
