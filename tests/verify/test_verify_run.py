"""``suanli nodes verify NAME`` as a job pinned to the node (``control.verify_jobs``): a real
server (its control loop, the local backend's process runtime) runs ``suanli verify --json``
as the node's whole-node job and records the report it leaves; a node cordoned by a failed
check runs its re-check there and is uncordoned by the pass, while renters' work waits.

No GPU is here: the first test measures the real CPU path (``device: cpu``); where a GPU's
report is needed, the job runs ``fake_gpu.py`` instead (a FAKE GPU: recorded NVML answers,
published figures), set as the server's verify command."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select

from suanli.db.models import Allocation, Node
from tests.control.control_helpers import Server, start_server, wait_until
from tests.event_helpers import events_text
from tests.sqlite_helpers import migrated_sqlite_url
from tests.verify.torch_helpers import require_torch

FAKE_GPU = Path(__file__).parent / "fake_gpu.py"


def fake_gpu(recording: str, gpus: int) -> str:
    """The job's command for a node of ``gpus`` recorded GPUs (a FAKE GPU, see the module docstring)."""
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_GPU))} {recording} {gpus} > verify-report.json"


def node(server: Server, name: str) -> dict:
    return next(n for n in server.get("/v1/nodes") if n["name"] == name)


def allocations(server: Server, job_id: int) -> list[tuple[str, list[int], int, int]]:
    """Where a job ran (ended allocations included), from the database."""
    with server.ctx.db.sessions() as s:
        rows = s.execute(
            select(Node.name, Allocation.gpu_indices, Allocation.cpu_milli, Allocation.memory_mib)
            .join(Node, Node.id == Allocation.node_id)
            .where(Allocation.job_id == job_id)
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]


def job(server: Server, job_id: int) -> dict:
    return server.get(f"/v1/jobs/{job_id}")


def test_a_verification_job_takes_the_whole_node_and_records_its_real_cpu_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CPU path measured for real, once (SQLite: the database adds nothing here)."""
    require_torch()
    # the process runtime passes the server's PATH on: this venv's `suanli` runs in the job
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    server = start_server(tmp_path / "data", migrated_sqlite_url(tmp_path / "suanli.db"))
    try:
        run = server.post("/v1/nodes/rtx4090-0/verify-runs", {"quick": True}, expect=202).json()
        done = wait_until(
            lambda: (x := server.get(f"/v1/nodes/rtx4090-0/verify-runs/{run['id']}"))["state"] != "waiting" and x, 120
        )
        assert done["state"] == "recorded" and done["verification"]["node_state"] == "ready", done
        j = job(server, run["job_id"])
        assert j["name"] == "verify-rtx4090-0" and j["state"] == "succeeded", j
        assert allocations(server, run["job_id"]) == [("rtx4090-0", [0, 1, 2, 3], 64_000, 256 * 1024)], j  # the whole node
        assert j["spec"]["run"] == "suanli verify --json --expect 'RTX 4090' --quick > verify-report.json", j["spec"]
        history = server.get("/v1/nodes/rtx4090-0/verifications", params={"full": "true"})
        assert len(history) == 1 and history[0]["status"] == "unmeasured" and history[0]["device"] == "cpu", history
        report = history[0]["report"]
        assert report["device"] == "cpu" and report["gpus"] == [] and report["job_id"] == run["job_id"], report
        assert report["cpu"]["tflops"] and report["cpu"]["memory_test_ok"] is True, report["cpu"]
        assert node(server, "rtx4090-0")["verified"]["status"] == "unmeasured"
        assert server.get("/v1/nodes/rtx4090-1/verifications") == []
    finally:
        server.close()


def test_a_node_cordoned_by_a_failed_check_is_rechecked_there_and_uncordoned_while_renters_wait(
    server: Server, cli: Callable[..., str]
) -> None:
    server.ctx.verify_command = fake_gpu("a100_sxm4_x4.json", 8)  # h100-0 is not what it is sold as
    out = cli("nodes", "verify", "h100-0", code=1)
    assert "h100-0: FAILED" in out and "wrong model: sold as H100 SXM5 80GB" in out and "(node cordoned, job" in out, out
    cli("nodes", "cordon", "h100-1")  # the only other H100 node: a renter's H100 job has nowhere to go
    member = server.post("/v1/users", {"name": "renter", "role": "member"}, expect=201).json()["token"]
    renter = server.post(
        "/v1/jobs", {"run": "sleep 0.1", "resources": {"accelerators": "H100:8"}}, expect=201, token=member
    ).json()
    wait_until(lambda: (job(server, renter["id"])["waiting"] or {}).get("code") == "capacity", 20)

    server.ctx.verify_command = fake_gpu("h100_sxm5_x8.json", 8)  # the node fixed: the re-check passes
    out = cli("nodes", "verify", "h100-0", "--uncordon")
    assert "h100-0: verified" in out and "(node ready, job" in out, out
    done = wait_until(lambda: (j := job(server, renter["id"]))["state"] == "succeeded" and j, 30)
    assert [a[0] for a in allocations(server, done["id"])] == ["h100-0"], done  # only once the pass made it ready
    history = server.get("/v1/nodes/h100-0/verifications")
    assert [h["status"] for h in history] == ["passed", "failed"], history
    events = server.get("/v1/events", params={"kind": "node"})
    first, last = events[0], events[-1]
    assert (first["from_state"], first["to_state"]) == ("ready", "cordoned"), events_text(events)
    assert first["message"].startswith("verify failed: GPU 0: wrong model"), events_text(events)
    assert (last["from_state"], last["to_state"], last["message"]) == ("cordoned", "ready", "verify passed, by admin"), (
        events_text(events)
    )


def test_a_verification_waits_while_its_node_is_busy_and_says_why(server: Server) -> None:
    server.ctx.verify_command = fake_gpu("h100_sxm5_x8.json", 8)
    busy = server.post("/v1/jobs", {"run": "sleep 30", "resources": {"accelerators": "H100:8"}}, expect=201).json()
    on = wait_until(lambda: (j := job(server, busy["id"]))["state"] == "running" and j["allocations"][0]["node"], 20)
    run = server.post(f"/v1/nodes/{on}/verify-runs", {}, expect=202).json()
    assert run["state"] == "waiting" and run["node"] == on, run
    waiting = wait_until(lambda: (w := job(server, run["job_id"])["waiting"]) and w["code"] != "scheduling" and w, 20)
    assert waiting["code"] == "pinned-node" and waiting["detail"] == f"{on}: busy (cpu)", waiting  # the whole node: its CPU first
    r = server.post(f"/v1/nodes/{on}/verify-runs", {})
    assert r.status_code == 409 and "is being verified already" in r.json()["error"]["message"], r.text
    server.post(f"/v1/jobs/{busy['id']}/cancel", expect=200)
    settled = wait_until(lambda: (x := server.get(f"/v1/nodes/{on}/verify-runs/{run['id']}"))["state"] != "waiting" and x, 30)
    assert settled["state"] == "recorded" and settled["verification"]["status"] == "passed", settled


def test_bad_runs_are_clear_and_change_nothing(server: Server, cli: Callable[..., str]) -> None:
    assert "no node 'nope'" in cli("nodes", "verify", "nope", code=1)
    assert server.get("/v1/jobs") == []
    member = server.post("/v1/users", {"name": "bob", "role": "member"}, expect=201).json()["token"]
    r = server.post("/v1/nodes/a100-0/verify-runs", {}, token=member)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", r.text
    for task in ({"run": "true", "pin_nodes": ["a100-0"]}, {"run": "true", "resources": {"node": "a100-0"}}):
        r = server.post("/v1/jobs", task, token=member)  # a renter has no way to pin
        assert r.status_code == 422, r.text
    assert server.get("/v1/jobs") == []

    server.ctx.verify_command = "echo 'no GPU tool here' >&2; exit 3"
    out = cli("nodes", "verify", "a100-0", code=1)
    assert "verification run 1 failed: job" in out and "failed (exit 3) and left no report" in out, out
    assert "no GPU tool here" in out, out
    server.ctx.verify_command = "echo '{not json' > verify-report.json"
    out = cli("nodes", "verify", "a100-0", code=1)
    assert "its report is not JSON" in out, out
    server.ctx.verify_command = 'echo \'{"device": "tpu", "gpus": []}\' > verify-report.json'
    out = cli("nodes", "verify", "a100-0", code=1)
    assert "is not a `suanli verify --json` report: report.device: expected 'cuda' or 'cpu'" in out, out
    assert server.get("/v1/nodes/a100-0/verifications") == [] and node(server, "a100-0")["state"] == "ready"
    r = server.post("/v1/nodes/a100-0/verify-runs", {"image": "ubuntu:22.04"})
    assert r.status_code == 422 and "not offered here" in r.text, r.text


def test_a_verification_of_a_down_node_waits_and_a_cancelled_one_records_nothing(server: Server) -> None:
    server.ctx.verify_command = fake_gpu("a100_sxm4_x4.json", 8)
    r = server.http.patch("/v1/nodes/a100-0", json={"state": "down"}, headers=server.headers)
    assert r.status_code == 200, r.text
    run = server.post("/v1/nodes/a100-0/verify-runs", {}, expect=202).json()
    waiting = wait_until(lambda: (w := job(server, run["job_id"])["waiting"]) and w["code"] != "scheduling" and w, 20)
    assert waiting == {**waiting, "code": "pinned-node", "detail": "a100-0: down or not run by this server"}, waiting
    server.post(f"/v1/jobs/{run['job_id']}/cancel", expect=200)
    settled = wait_until(lambda: (x := server.get(f"/v1/nodes/a100-0/verify-runs/{run['id']}"))["state"] != "waiting" and x, 30)
    assert (settled["state"], settled["error"], settled["verification"]) == ("failed", f"job {run['job_id']} was cancelled", None)
    assert server.get("/v1/nodes/a100-0/verifications") == [] and node(server, "a100-0")["state"] == "down"


def test_no_wait_queues_the_run_and_verify_run_shows_its_result(server: Server, cli: Callable[..., str]) -> None:
    server.ctx.verify_command = fake_gpu("h100_sxm5_x8.json", 8)
    out = cli("nodes", "verify", "h100-1", "--no-wait")
    assert out.startswith("h100-1: verification run 1 queued as job "), out
    shown = wait_until(lambda: "verified" in (x := cli("nodes", "verify-run", "h100-1", "1")) and x, 30)
    assert "(node ready, job " in shown, shown
    data = json.loads(cli("nodes", "verify-run", "h100-1", "1", "--json"))
    assert (data["state"], data["verification"]["status"], data["verification"]["gpu_count"]) == ("recorded", "passed", 8), data
    assert "no verification run 9 of node 'h100-1'" in cli("nodes", "verify-run", "h100-1", "9", code=1)
