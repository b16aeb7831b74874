"""The HTTP API against the real app, control loop and local backend, on SQLite
and PostgreSQL."""

from __future__ import annotations

import re

from sqlalchemy import func, select

from suanli.control.launcher import job_volume
from suanli.db.models import Allocation, Event, Gpu, Instance, Job
from tests.control.control_helpers import Server, wait_state, wait_until


def counts(srv: Server) -> tuple[int, int, int, int]:
    with srv.ctx.db.sessions() as s:
        return tuple(s.scalar(select(func.count()).select_from(m)) for m in (Instance, Job, Allocation, Event))  # type: ignore[return-value]


def test_health_docs_metrics_and_auth(server: Server) -> None:
    assert server.http.get("/healthz").json()["ok"] is True
    assert server.http.get("/docs").status_code == 200
    assert "/v1/instances" in server.http.get("/openapi.json").json()["paths"]
    r = server.http.get("/v1/gpus")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    r = server.http.get("/v1/gpus", headers={"Authorization": "Bearer sl_nope"})
    assert r.status_code == 401 and "invalid" in r.json()["error"]["message"]
    assert server.http.get("/v1/nothing").json()["error"]["code"] == "not_found"
    server.get("/v1/gpus")
    # /metrics: a scraper off this machine (the test client is not loopback) needs an operator's token
    assert server.http.get("/metrics").status_code == 401
    text = server.http.get("/metrics", headers=server.headers).text
    assert (
        "suanli_control_ticks" in text
        and "suanli_http_requests_total" in text
        and 'suanli_gpu_milli_total{model="H100",virtual="true"} 16000.0' in text
    )


def test_admin_token_file_and_hash_only(server: Server) -> None:
    path = server.data_dir / "admin-token"
    assert path.read_text().strip() == server.token
    assert path.stat().st_mode & 0o777 == 0o600
    with server.ctx.db.engine.connect() as c:
        stored = [row[0] for row in c.exec_driver_sql("SELECT token_hash FROM api_tokens")]
    assert server.token not in stored and len(stored[0]) == 64


def test_gpus_catalog_lists_demo_inventory_as_virtual(server: Server) -> None:
    gpus = {g["model"]: g for g in server.get("/v1/gpus")}
    assert set(gpus) == {"H100", "A100-80G", "RTX4090", "Ascend-910B"}
    assert gpus["H100"]["total"] == 16 and gpus["H100"]["free"] == 16
    assert all(g["virtual"] for g in gpus.values())
    assert gpus["H100"]["vendor"] == "NVIDIA" and gpus["H100"]["bf16_tflops"] > 900  # catalog facts
    assert gpus["Ascend-910B"]["vendor"] == "Huawei"
    assert all(n["virtual"] for n in server.get("/v1/nodes"))


def test_nodes_add_is_operator_only_and_all_or_nothing(server: Server) -> None:
    inv = {
        "nodes": [
            {"name": "l40s-0", "gpu_model": "L40S", "gpu_count": 4, "gpu_memory_gib": 48, "cpu_cores": 64, "memory_gib": 512}
        ]
    }
    member = server.post("/v1/users", {"name": "bob", "role": "member"}, expect=201).json()["token"]
    r = server.post("/v1/nodes", inv, token=member)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    operator = server.post("/v1/users", {"name": "olga", "role": "operator"}, expect=201).json()["token"]
    added = server.post("/v1/nodes", inv, expect=201, token=operator).json()
    assert added[0]["name"] == "l40s-0" and added[0]["virtual"] and len(added[0]["gpus"]) == 4
    # a batch with one duplicate adds nothing
    dup = {"nodes": [{"name": "new-0", "gpu_model": "L40S", "gpu_count": 1, "cpu_cores": 8, "memory_gib": 32}, inv["nodes"][0]]}
    r = server.post("/v1/nodes", dup, token=operator)
    assert r.status_code == 409 and r.json()["error"]["code"] == "exists"
    assert "new-0" not in {n["name"] for n in server.get("/v1/nodes")}
    bad = server.post(
        "/v1/nodes", {"nodes": [{"name": "x", "gpu_model": "H100", "gpu_count": -1, "cpu_cores": 1, "memory_gib": 1}]}
    )
    assert bad.status_code == 422 and "nodes.0.gpu_count" in bad.json()["error"]["message"]


def test_instance_lifecycle(server: Server) -> None:
    inst = server.post(
        "/v1/instances", {"gpu_model": "h100", "gpu_count": 2, "image": "python", "disk_gib": 20}, expect=201
    ).json()
    assert inst["state"] == "pending" and inst["gpu_model"] == "H100"
    inst = wait_state(server, "instance", inst["id"], ("running",))
    [alloc] = inst["allocations"]
    assert alloc["gpu_model"] == "H100" and len(alloc["gpu_indices"]) == 2
    out = server.post(
        f"/v1/instances/{inst['id']}/exec", {"command": "echo $CUDA_VISIBLE_DEVICES > mark; cat mark"}, expect=200
    ).json()
    assert out == {"exit_code": 0, "output": ",".join(map(str, alloc["gpu_indices"])) + "\n"}
    assert server.post(f"/v1/instances/{inst['id']}/exec", {"command": "exit 7"}, expect=200).json()["exit_code"] == 7
    assert "ready on" in server.get(f"/v1/instances/{inst['id']}/logs")["text"]
    server.post(f"/v1/instances/{inst['id']}/stop", expect=200)
    inst = wait_state(server, "instance", inst["id"], ("stopped",))
    assert inst["allocations"] == []
    assert {g["model"]: g["free"] for g in server.get("/v1/gpus")}["H100"] == 16
    r = server.post(f"/v1/instances/{inst['id']}/exec", {"command": "true"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "invalid_state"
    server.post(f"/v1/instances/{inst['id']}/start", expect=200)
    wait_state(server, "instance", inst["id"], ("running",))
    # the disk survived stop/start
    assert server.post(f"/v1/instances/{inst['id']}/exec", {"command": "cat mark"}, expect=200).json()["exit_code"] == 0
    server.http.delete(f"/v1/instances/{inst['id']}", headers=server.headers)
    wait_until(lambda: server.get("/v1/instances", params={"all": True})[0]["state"] == "deleted")
    assert server.get("/v1/instances") == []
    states = [e["to_state"] for e in server.get("/v1/events", params={"kind": "instance", "object_id": inst["id"]})]
    assert states == ["pending", "running", "stopping", "stopped", "pending", "running", "stopping", "deleted"]
    assert all(g["used_milli"] == 0 for n in server.get("/v1/nodes") for g in n["gpus"])


def test_fractional_instances_share_one_gpu(server: Server) -> None:
    a = server.post("/v1/instances", {"gpu_model": "RTX4090", "gpu_milli": 500}, expect=201).json()
    b = server.post("/v1/instances", {"gpu_model": "RTX4090", "gpu_milli": 500}, expect=201).json()
    a = wait_state(server, "instance", a["id"], ("running",))
    b = wait_state(server, "instance", b["id"], ("running",))
    assert a["allocations"][0]["milli_per_gpu"] == 500
    with server.ctx.db.sessions() as s:
        used = sorted(s.scalars(select(Gpu.used_milli).where(Gpu.model == "RTX4090", Gpu.used_milli > 0)))
    assert sum(used) == 1000 and all(u <= 1000 for u in used)


def test_job_runs_with_injected_environment(server: Server) -> None:
    task = {
        "name": "env-check",
        "resources": {"accelerators": "a100-80g:2"},
        "envs": {"GREETING": "hi", "NPROC_PER_NODE": "7", "RANK": "5"},  # the GPUs decide NPROC_PER_NODE; RANK is the task's own
        "setup": "echo setting up",
        "run": "echo $GREETING $CUDA_VISIBLE_DEVICES $NNODES $NODE_RANK $NPROC_PER_NODE $MASTER_ADDR $SUANLI_JOB_ID $SUANLI_VIRTUAL_GPUS "
        '"${WORLD_SIZE-unset}" "${LOCAL_RANK-unset}" $RANK; test -n "$MASTER_PORT"',
    }
    job = server.post("/v1/jobs", task, expect=201).json()
    assert job["state"] == "queued"
    job = wait_state(server, "job", job["id"], ("succeeded", "failed"))
    assert job["state"] == "succeeded" and job["exit_code"] == 0
    logs = server.get(f"/v1/jobs/{job['id']}/logs")["text"]
    assert "setting up" in logs
    # per-node variables only: the one process started per node is none of torchrun's workers
    assert re.search(rf"^hi \d+,\d+ 1 0 2 127\.0\.0\.1 {job['id']} 1 unset unset 5$", logs, re.M), logs
    states = [e["to_state"] for e in server.get("/v1/events", params={"kind": "job", "object_id": job["id"]})]
    assert states == ["queued", "running", "succeeded"]


def test_multi_node_job_gets_distinct_nodes_and_ranks(server: Server) -> None:
    task = {
        "resources": {"accelerators": "H100:8"},
        "num_nodes": 2,
        "run": "echo node=$NODE_RANK nnodes=$NNODES nproc=$NPROC_PER_NODE nodes=$SUANLI_NUM_NODES rank=${RANK-unset}",
    }
    job = server.post("/v1/jobs", task, expect=201).json()
    job = wait_state(server, "job", job["id"], ("succeeded", "failed"))
    assert job["state"] == "succeeded"
    logs = server.get(f"/v1/jobs/{job['id']}/logs")["text"]
    assert "node=0 nnodes=2 nproc=8 nodes=2 rank=unset" in logs and "node=1 nnodes=2 nproc=8 nodes=2 rank=unset" in logs, logs
    events = server.get("/v1/events", params={"kind": "allocation"})
    assert [e["to_state"] for e in events] == ["bound", "bound", "released", "released"]
    with server.ctx.db.sessions() as s:
        allocs = list(s.scalars(select(Allocation).where(Allocation.job_id == job["id"])))
    assert len({a.node_id for a in allocs}) == 2 and all(a.ended_at and a.ended_at >= a.started_at for a in allocs)


def test_job_failure_records_exit_code(server: Server) -> None:
    job = server.post("/v1/jobs", {"resources": {"accelerators": "RTX4090:1"}, "run": "echo boom; exit 3"}, expect=201).json()
    job = wait_state(server, "job", job["id"], ("succeeded", "failed"))
    assert job["state"] == "failed" and job["exit_code"] == 3 and "code 3" in job["reason"]


def test_cancel_running_job_stops_process_group(server: Server) -> None:
    run = "sleep 300 & echo $! > child.pid; wait"
    job = server.post("/v1/jobs", {"resources": {"accelerators": "H100:1"}, "run": run}, expect=201).json()
    wait_state(server, "job", job["id"], ("running",))
    pid_file = job_volume(server.data_dir, job["id"]) / "child.pid"
    pid = int(wait_until(lambda: pid_file.exists() and pid_file.read_text().strip()))
    server.post(f"/v1/jobs/{job['id']}/cancel", expect=200)
    job = wait_state(server, "job", job["id"], ("cancelled",))
    assert job["allocations"] == []
    assert wait_until(lambda: not _alive(pid), 10)


def test_cancel_queued_job_and_unschedulable_waits(server: Server) -> None:
    blocker = server.post("/v1/jobs", {"resources": {"accelerators": "Ascend-910B:8"}, "run": "sleep 300"}, expect=201).json()
    wait_state(server, "job", blocker["id"], ("running",))
    waiting = server.post("/v1/jobs", {"resources": {"accelerators": "Ascend-910B:1"}, "run": "true"}, expect=201).json()
    wait_until(lambda: getattr(server.ctx.loop.stats.unplaced.get(("job", waiting["id"])), "detail", None) == "gpu")
    job = server.get(f"/v1/jobs/{waiting['id']}")
    assert job["state"] == "queued" and job["reason"] == "waiting for capacity (gpu)", job
    assert job["waiting"]["code"] == "capacity" and job["waiting"]["detail"] == "gpu" and job["waiting"]["since"], job
    assert server.get(f"/v1/jobs/{blocker['id']}")["waiting"] is None
    assert server.post(f"/v1/jobs/{waiting['id']}/cancel", expect=200).json()["state"] == "cancelled"
    server.post(f"/v1/jobs/{blocker['id']}/cancel", expect=200)
    wait_state(server, "job", blocker["id"], ("cancelled",))


def test_rejected_requests_change_nothing(server: Server) -> None:
    before = counts(server)
    cases = [
        ({"resources": {"accelerators": "H100:x"}, "run": "true"}, "resources.accelerators"),
        ({"resources": {"accelerators": "B300:1"}, "run": "true"}, "resources.accelerators: unknown GPU model 'B300'"),
        ({"resources": {"accelerators": "H100:9"}, "run": "true"}, "never fits"),
        ({"resources": {"accelerators": "H100:1", "gpu_milli": 2000}, "run": "true"}, "resources.gpu_milli"),
        ({"resources": {"acelerators": "H100:1"}, "run": "true"}, "resources.acelerators"),
        ({"resources": {"accelerators": "H100:1"}}, "run"),
        ({"run": "true", "num_nodes": 0}, "num_nodes"),
        ({"run": "true", "envs": {"1BAD": "x"}}, "envs"),
        # never fits the inventory: refused at submission, naming the limit and the largest value that fits
        ({"resources": {"accelerators": "RTX4090:1", "memory": 60000}, "run": "true"}, "60000 GiB of memory; the largest has"),
        ({"resources": {"accelerators": "RTX4090:1", "cpus": 1000}, "run": "true"}, "1000 CPUs; the largest has"),
        ({"resources": {"accelerators": "H100:1"}, "num_nodes": 50, "run": "true"}, "a gang of 50 nodes never fits"),
    ]
    for body, needle in cases:
        r = server.post("/v1/jobs", body)
        assert r.status_code == 422, (body, r.text)
        err = r.json()["error"]
        assert err["code"] == "invalid" and needle in err["message"], (needle, err)
    for body in ({"gpu_model": "H100", "gpu_count": 99}, {"gpu_model": "nope"}, {"gpu_milli": 1500}, {}):
        assert server.post("/v1/instances", body).status_code == 422
    # contradictions are refused with both values named, never resolved silently
    r = server.post("/v1/instances", {"gpu_model": "H100", "gpu_count": 2, "gpu_milli": 500})
    assert r.status_code == 422 and "2 whole GPU(s) and gpu_milli 500" in r.json()["error"]["message"], r.text
    r = server.post("/v1/jobs", {"resources": {"accelerators": "H100:2", "gpu_milli": 500}, "run": "true"})
    assert r.status_code == 422 and "gpu_milli 500" in r.text and "H100:2" in r.text, r.text
    r = server.post("/v1/instances", {"gpu_model": "RTX4090", "memory_gib": 60000})
    assert r.status_code == 422 and "60000 GiB of memory; the largest has" in r.json()["error"]["message"], r.text
    r = server.post("/v1/instances", {"gpu_model": "RTX4090", "cpus": 1000})
    assert r.status_code == 422 and "1000 CPUs; the largest has" in r.json()["error"]["message"], r.text
    assert server.post("/v1/instances/999/stop").status_code == 404
    assert server.post("/v1/jobs/999/cancel").json()["error"]["code"] == "not_found"
    assert counts(server) == before


def test_members_see_only_their_tenant(server: Server) -> None:
    server.post("/v1/tenants", {"name": "lab"}, expect=201)
    server.post("/v1/billing/topups", {"tenant": "lab", "amount": "1000"}, expect=201)  # prepaid
    alice = server.post("/v1/users", {"name": "alice", "tenant": "lab"}, expect=201).json()["token"]
    mine = server.post("/v1/jobs", {"run": "true", "resources": {"accelerators": "RTX4090:1"}}, expect=201, token=alice).json()
    server.post("/v1/jobs", {"run": "true"}, expect=201)  # the admin's, CPU only
    seen = server.http.get("/v1/jobs", headers={"Authorization": f"Bearer {alice}"}).json()
    assert [j["id"] for j in seen] == [mine["id"]]
    assert len(server.get("/v1/jobs")) == 2
    other = server.get("/v1/jobs")[1]["id"]
    assert server.http.get(f"/v1/jobs/{other}", headers={"Authorization": f"Bearer {alice}"}).status_code == 404
    assert server.post("/v1/users", {"name": "eve"}, token=alice).status_code == 403


def _alive(pid: int) -> bool:
    from suanli.backends.local.process import start_ticks

    return start_ticks(pid) is not None


def test_advisor_router_memory_and_tco(server: Server) -> None:
    mem = server.post("/v1/advise/memory", {"model": "qwen2.5-72b", "precision": "int4", "context": 32768}, expect=200).json()
    assert mem["model"] == "Qwen2.5-72B" and mem["total_bytes"] > 0
    bad = server.post("/v1/advise/memory", {"model": "no-such-model"})
    assert bad.status_code == 422 and "no-such-model" in bad.json()["error"]["message"]
    assert server.post("/v1/advise/memory", {"config": "/etc/passwd"}).status_code == 422  # no server-side paths
    tco = server.post("/v1/advise/tco", {"gpus": 256, "utilization": 0.6}, expect=200).json()
    assert tco["cheaper"] in ("rent", "build")
    assert server.http.post("/v1/advise/tco", json={}).status_code == 401


def test_advisor_fit_says_what_this_platform_has_of_each_fitting_gpu(server: Server) -> None:
    options = server.post("/v1/advise/fit", {"model": "llama-3.1-70b"}, expect=200).json()
    assert [o["rank"] for o in options] == list(range(1, len(options) + 1))
    here = {o["here"]["model"]: o for o in options if o["here"]}
    assert set(here) == {"H100", "A100-80G", "RTX4090", "Ascend-910B"}  # the demo inventory, matched to the catalog
    assert here["H100"]["here"] == {"model": "H100", "total": 16, "free": 16, "virtual": True}
    assert here["H100"]["gpus"] == 2 and here["RTX4090"]["gpus"] == 8  # 141 GB of bf16 weights
    server.post("/v1/instances", {"gpu_model": "H100", "gpu_count": 8}, expect=201)
    wait_until(
        lambda: server.post("/v1/advise/fit", {"model": "llama-3.1-70b"}).json()[here["H100"]["rank"] - 1]["here"]["free"] == 8
    )
    bad = server.post("/v1/advise/fit", {"params": "-3B"})
    assert bad.status_code == 422


def test_nvml_discovery_degrades_to_virtual() -> None:
    """Without a driver (this machine) discovery finds nothing and never raises;
    NVML names shorten to the catalog's model names."""
    from suanli.backends.local.nvml import discover_gpus, short_model_name

    assert isinstance(discover_gpus(), list)
    assert short_model_name("NVIDIA H100 80GB HBM3") == "H100"
    assert short_model_name("NVIDIA GeForce RTX 4090") == "RTX4090"
    assert short_model_name("NVIDIA H200") == "H200"


def test_cordoned_nodes_get_no_new_work(server: Server) -> None:
    for name in ("rtx4090-0", "rtx4090-1"):
        r = server.http.patch(f"/v1/nodes/{name}", json={"state": "cordoned"}, headers=server.headers)
        assert r.status_code == 200 and r.json()["state"] == "cordoned"
    job = server.post("/v1/jobs", {"resources": {"accelerators": "RTX4090:1"}, "run": "true"}, expect=201).json()
    wait_until(
        lambda: getattr(server.ctx.loop.stats.unplaced.get(("job", job["id"])), "detail", None) == "gpu_model"
    )  # no schedulable RTX4090
    assert {g["model"]: g["free"] for g in server.get("/v1/gpus")}["RTX4090"] == 0
    server.http.patch("/v1/nodes/rtx4090-1", json={"state": "ready"}, headers=server.headers)
    assert wait_state(server, "job", job["id"], ("succeeded",))["exit_code"] == 0
    bad = server.http.patch("/v1/nodes/rtx4090-1", json={"state": "gone"}, headers=server.headers)
    assert bad.status_code == 422 and "state" in bad.json()["error"]["message"]
    assert server.http.patch("/v1/nodes/nope", json={"state": "ready"}, headers=server.headers).status_code == 404
    states = [(e["from_state"], e["to_state"]) for e in server.get("/v1/events", params={"kind": "node"})]
    assert states == [("ready", "cordoned"), ("ready", "cordoned"), ("cordoned", "ready")]


def test_one_failing_node_fails_the_gang_and_stops_the_rest(server: Server) -> None:
    run = 'if [ "$NODE_RANK" = 1 ]; then sleep 0.5; exit 4; fi; echo $$ > leader.pid; exec sleep 300'
    job = server.post("/v1/jobs", {"resources": {"accelerators": "H100:1"}, "num_nodes": 2, "run": run}, expect=201).json()
    job = wait_state(server, "job", job["id"], ("failed", "succeeded"), 30)
    assert job["state"] == "failed" and job["exit_code"] == 4 and job["allocations"] == []
    pid_file = job_volume(server.data_dir, job["id"]) / "leader.pid"
    assert not _alive(int(pid_file.read_text()))
