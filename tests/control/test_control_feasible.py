"""Issue 19: when the inventory shrinks so that waiting work can never fit, that work
fails with the reason instead of waiting forever; a cordon keeps counting."""

from __future__ import annotations

from sqlalchemy import delete, select

from suanli.db.models import Gpu, Node
from tests.control.control_helpers import Server, wait_state, wait_until


def test_removing_the_only_nodes_that_fit_fails_waiting_work_with_the_reason(server: Server) -> None:
    rtx = [n["name"] for n in server.get("/v1/nodes") if n["gpu_model"] == "RTX4090"]
    assert rtx, server.get("/v1/nodes")
    for name in rtx:  # cordoned: no new work, but still inventory (a cordon is usually temporary)
        r = server.http.patch(f"/v1/nodes/{name}", json={"state": "cordoned"}, headers=server.headers)
        assert r.status_code == 200, r.text
    job = server.post("/v1/jobs", {"resources": {"accelerators": "RTX4090:1"}, "run": "true"}, expect=201).json()
    inst = server.post("/v1/instances", {"gpu_model": "RTX4090", "gpu_count": 1}, expect=201).json()
    waiting = wait_until(lambda: (j := server.get(f"/v1/jobs/{job['id']}"))["waiting"]["code"] == "capacity" and j)
    assert waiting["state"] == "queued" and waiting["waiting"]["detail"] == "gpu_model", waiting
    # the RTX 4090 nodes leave the inventory for good (an operator removes them)
    with server.ctx.db.transaction() as s:
        ids = list(s.scalars(select(Node.id).where(Node.name.in_(rtx))))
        s.execute(delete(Gpu).where(Gpu.node_id.in_(ids)))
        s.execute(delete(Node).where(Node.id.in_(ids)))
    server.ctx.wake()
    failed = wait_state(server, "job", job["id"], ("failed",))
    assert failed["reason"].startswith("never fits this platform: no node has GPU model RTX4090 (registered: "), failed
    assert failed["waiting"] is None, failed
    gone = wait_state(server, "instance", inst["id"], ("failed",))
    assert gone["reason"].startswith("never fits this platform: no node has GPU model RTX4090"), gone
    # and new work for it is refused up front
    r = server.post("/v1/jobs", {"resources": {"accelerators": "RTX4090:1"}, "run": "true"})
    assert r.status_code == 422 and "unknown GPU model" in r.json()["error"]["message"], r.text


def test_a_pipeline_with_one_job_that_never_fits_is_refused_whole(server: Server) -> None:
    pipeline = {
        "jobs": [
            {"name": "prep", "resources": {"accelerators": "H100:1"}, "run": "true"},
            {"name": "huge", "resources": {"accelerators": "H100:1"}, "num_nodes": 50, "depends_on": ["prep"], "run": "true"},
        ]
    }
    r = server.post("/v1/pipelines", pipeline)
    assert r.status_code == 422, r.text
    assert "a gang of 50 nodes never fits: at most" in r.json()["error"]["message"], r.text
    assert server.get("/v1/jobs") == [], "a refused pipeline queued some of its jobs"


def test_requests_at_the_limits_are_accepted_and_start_on_the_empty_cluster(server: Server) -> None:
    """The largest value a refusal names is one that fits: work asking exactly for it starts."""
    nodes = [n for n in server.get("/v1/nodes") if n["gpu_model"] == "H100"]
    big = max(nodes, key=lambda n: (n["gpu_count"], n["memory_mib"], n["cpu_milli"]))
    whole = {"accelerators": f"H100:{big['gpu_count']}", "cpus": big["cpu_milli"] / 1000, "memory": big["memory_mib"] / 1024}
    fit = [n for n in nodes if n["gpu_count"] >= 1]
    for body in (
        {"resources": whole, "run": "true"},
        {"resources": {"accelerators": "H100:1"}, "num_nodes": len(fit), "run": "true"},
    ):
        job = server.post("/v1/jobs", body, expect=201).json()
        done = wait_state(server, "job", job["id"], ("succeeded", "failed"), timeout_s=30)
        assert done["state"] == "succeeded", (body, done)
    too_big = dict(whole, memory=big["memory_mib"] / 1024 + 1)
    r = server.post("/v1/jobs", {"resources": too_big, "run": "true"})
    assert r.status_code == 422 and "of memory; the largest has" in r.text, r.text
