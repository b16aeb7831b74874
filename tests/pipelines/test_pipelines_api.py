"""Pipelines and sweeps over the HTTP API, against the real app, control loop and local
backend, on SQLite and PostgreSQL: the graph's checks, the gate, cancel on failure."""

from __future__ import annotations

from sqlalchemy import func, select

from suanli.db.models import Job, JobDependency
from tests.control.control_helpers import Server, wait_state

GPU = {"accelerators": "RTX4090:1"}


def counts(srv: Server) -> tuple[int, int]:
    with srv.ctx.db.sessions() as s:
        return (s.scalar(select(func.count()).select_from(Job)), s.scalar(select(func.count()).select_from(JobDependency)))  # type: ignore[return-value]


def events_of(srv: Server, job_id: int) -> list[dict]:
    return srv.get("/v1/events", params={"kind": "job", "object_id": job_id})


def test_pipeline_runs_in_order_and_waits_with_reason(server: Server) -> None:
    gate = server.data_dir / "gate"
    pipeline = {
        "name": "train-eval",
        "jobs": [
            {"name": "prep", "resources": GPU, "run": f"while [ ! -e {gate} ]; do sleep 0.05; done; echo prep"},
            {"name": "train", "resources": GPU, "depends_on": ["prep"], "run": "echo train"},
            {"name": "report", "resources": GPU, "depends_on": ["train", "prep"], "after": "finished", "run": "echo report"},
        ],
    }
    jobs = server.post("/v1/pipelines", pipeline, expect=201).json()
    prep, train, report = (j["id"] for j in jobs)
    assert [j["depends_on"] for j in jobs] == [[], [prep], [prep, train]], jobs
    assert len({j["group"] for j in jobs}) == 1 and jobs[0]["group"] == f"train-eval#{prep}", jobs
    wait_state(server, "job", prep, ("running",))
    listed = {j["id"]: j for j in server.get("/v1/jobs")}
    assert listed[train]["state"] == "queued", listed[train]
    assert listed[train]["reason"] == f"waiting for job {prep} (prep) to succeed", listed[train]
    assert listed[report]["reason"] == f"waiting for job {prep} (prep) to finish (and 1 more)", listed[report]
    assert listed[report]["depends_on"] == [prep, train]
    gate.touch()
    audited = [r for r in server.get("/v1/audit") if r["action"] == "pipelines.create"]
    assert [r["object"] for r in audited] == [f"job/{prep}..{report}"], audited
    done = wait_state(server, "job", report, ("succeeded", "failed", "cancelled"))
    assert done["state"] == "succeeded", events_of(server, report)
    times = {j["id"]: j for j in server.get("/v1/jobs")}
    assert times[prep]["finished_at"] <= times[train]["started_at"], times
    assert times[train]["finished_at"] <= times[report]["started_at"], times


def test_failure_cancels_dependents_transitively_with_reason(server: Server) -> None:
    pipeline = {
        "jobs": [
            {"name": "a", "resources": GPU, "run": "exit 3"},
            {"name": "b", "resources": GPU, "depends_on": ["a"], "run": "echo b"},
            {"name": "c", "resources": GPU, "depends_on": ["b"], "run": "echo c"},
            {"name": "cleanup", "resources": GPU, "depends_on": ["b"], "after": "finished", "run": "echo clean"},
        ]
    }
    a, b, c, cleanup = (j["id"] for j in server.post("/v1/pipelines", pipeline, expect=201).json())
    assert wait_state(server, "job", a, ("failed",))["exit_code"] == 3
    jb = wait_state(server, "job", b, ("cancelled",))
    assert jb["reason"] == f"dependency job {a} (a) failed", jb
    jc = wait_state(server, "job", c, ("cancelled",))
    assert jc["reason"] == f"dependency job {b} (b) was cancelled: dependency job {a} (a) failed", jc
    assert wait_state(server, "job", cleanup, ("succeeded", "failed", "cancelled"))["state"] == "succeeded"
    assert [e["to_state"] for e in events_of(server, c)] == ["queued", "cancelled"], events_of(server, c)
    assert jb["allocations"] == [] and jb["started_at"] is None


def test_cancelled_dependency_cancels_dependent(server: Server) -> None:
    first = server.post("/v1/jobs", {"name": "slow", "resources": GPU, "run": "sleep 300"}, expect=201).json()
    wait_state(server, "job", first["id"], ("running",))
    (nxt,) = server.post(
        "/v1/pipelines", {"jobs": [{"resources": GPU, "depends_on": [first["id"]], "run": "true"}]}, expect=201
    ).json()
    assert server.get(f"/v1/jobs/{nxt['id']}")["reason"] == f"waiting for job {first['id']} (slow) to succeed"
    server.post(f"/v1/jobs/{first['id']}/cancel", expect=200)
    got = wait_state(server, "job", nxt["id"], ("cancelled",))
    assert got["reason"] == f"dependency job {first['id']} (slow) cancelled", got


def test_bad_graphs_are_refused_and_create_nothing(server: Server) -> None:
    before = counts(server)
    cyc = {
        "jobs": [
            {"name": "a", "depends_on": ["c"], "run": "true"},
            {"name": "b", "depends_on": ["a"], "run": "true"},
            {"name": "c", "depends_on": ["b"], "run": "true"},
        ]
    }
    r = server.post("/v1/pipelines", cyc)
    assert r.status_code == 422 and "a dependency cycle: a -> c -> b -> a" in r.json()["error"]["message"], r.text
    r = server.post("/v1/pipelines", {"jobs": [{"name": "a", "depends_on": ["a"], "run": "true"}]})
    assert r.status_code == 422 and "a -> a" in r.json()["error"]["message"], r.text
    r = server.post(
        "/v1/pipelines", {"jobs": [{"name": "a", "run": "true"}, {"name": "b", "depends_on": ["nope"], "run": "true"}]}
    )
    msg = r.json()["error"]["message"]
    assert r.status_code == 422 and "jobs[1].depends_on: no job named 'nope'" in msg and "a, b" in msg, r.text
    r = server.post("/v1/pipelines", {"jobs": [{"name": "a", "run": "true"}, {"name": "a", "run": "true"}]})
    assert r.status_code == 422 and "jobs[1].name" in r.json()["error"]["message"], r.text
    r = server.post(
        "/v1/pipelines", {"jobs": [{"name": "a", "run": "true"}, {"name": "b", "depends_on": [999999], "run": "true"}]}
    )
    assert r.status_code == 422 and "no job 999999 of this tenant" in r.json()["error"]["message"], r.text
    r = server.post("/v1/pipelines", {"jobs": [{"name": "a", "run": "true"}, {"name": "b", "image": "no-such", "run": "true"}]})
    assert r.status_code in (404, 422), r.text
    r = server.post("/v1/jobs", {"run": "true", "matrix": {"lr": [1, 2]}})
    assert r.status_code == 422 and "POST /v1/pipelines" in r.json()["error"]["message"], r.text
    assert counts(server) == before


def test_another_tenants_job_cannot_be_depended_on(server: Server) -> None:
    mine = server.post("/v1/jobs", {"name": "admin-job", "run": "true"}, expect=201).json()
    server.post("/v1/tenants", {"name": "other"}, expect=201)
    other = server.post("/v1/users", {"name": "eve", "role": "member", "tenant": "other"}, expect=201).json()["token"]
    before = counts(server)
    r = server.post("/v1/pipelines", {"jobs": [{"run": "true", "depends_on": [mine["id"]]}]}, token=other)
    assert r.status_code == 422 and f"no job {mine['id']} of this tenant" in r.json()["error"]["message"], r.text
    r = server.post("/v1/jobs", {"run": "true", "depends_on": [mine["id"]]}, token=other)
    assert r.status_code == 422, r.text
    assert counts(server) == before
    # a prepaid tenant's own pipeline: the dependent waits unplaced, holding nothing
    server.post("/v1/billing/topups", {"tenant": "other", "amount": "1000"}, expect=201)
    gate = server.data_dir / "gate-eve"
    first = server.post(
        "/v1/jobs", {"name": "first", "resources": GPU, "run": f"while [ ! -e {gate} ]; do sleep 0.05; done"}, token=other
    )
    assert first.status_code == 201, first.text
    (nxt,) = server.post(
        "/v1/pipelines", {"jobs": [{"resources": GPU, "depends_on": [first.json()["id"]], "run": "true"}]}, token=other
    ).json()
    wait_state(server, "job", first.json()["id"], ("running",))
    got = server.get(f"/v1/jobs/{nxt['id']}")
    assert got["state"] == "queued" and got["allocations"] == [] and got["reason"].startswith("waiting for job"), got
    gate.touch()
    assert wait_state(server, "job", nxt["id"], ("succeeded", "failed", "cancelled"))["state"] == "succeeded"


def test_sweep_makes_one_job_per_combination(server: Server) -> None:
    task = {
        "name": "sw",
        "run": 'echo "lr=$LR bs=$BS"',
        "envs": {"EPOCHS": 1},
        "matrix": {"LR": ["1e-4", "3e-4"], "BS": [16, 32]},
    }
    jobs = server.post("/v1/pipelines", {"jobs": [task]}, expect=201).json()
    names = [j["name"] for j in jobs]
    assert names == ["sw-LR=1e-4-BS=16", "sw-LR=1e-4-BS=32", "sw-LR=3e-4-BS=16", "sw-LR=3e-4-BS=32"], names
    assert {j["group"] for j in jobs} == {f"sw#{jobs[0]['id']}"}, jobs
    assert jobs[3]["spec"]["envs"] == {"EPOCHS": 1, "LR": "3e-4", "BS": "32"}, jobs[3]["spec"]
    done = wait_state(server, "job", jobs[3]["id"], ("succeeded", "failed"))
    assert done["state"] == "succeeded"
    assert server.get(f"/v1/jobs/{jobs[3]['id']}/logs")["text"].strip() == "lr=3e-4 bs=32"
    before = counts(server)
    for bad, says in [
        ({"LR": []}, "no values"),
        ({"LR": [1, 1]}, "listed twice"),
        ({"A": list(range(20)), "B": list(range(20))}, "400 combinations: at most 256"),
        ({"1x": [1]}, "not a valid environment variable name"),
    ]:
        r = server.post("/v1/pipelines", {"jobs": [{**task, "matrix": bad}]})
        assert r.status_code == 422 and says in r.json()["error"]["message"], (bad, r.text)
    assert counts(server) == before
