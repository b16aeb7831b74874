"""Requests judged before they wait (issue 19), through the CLI against the in-process
server and its demo inventory: what can never run and what contradicts itself exits
non-zero with the limit or both values named, and creates nothing."""

from __future__ import annotations

import json
from collections.abc import Callable

from sqlalchemy import func, select

from suanli.db.models import Instance, Job
from tests.control.control_helpers import Server, wait_state, wait_until


def _counts(server: Server) -> tuple[int, int]:
    with server.ctx.db.sessions() as s:
        return s.scalar(select(func.count()).select_from(Instance)), s.scalar(select(func.count()).select_from(Job))  # type: ignore[return-value]


def test_never_fits_and_contradictions_create_nothing(server: Server, cli: Callable[..., str]) -> None:
    before = _counts(server)
    out = cli("instances", "create", "--gpu", "rtx4090:1", "--memory", "999999", code=1)
    assert "memory" in out and "65536" in out, out  # the API's bound on memory_gib
    out = cli("instances", "create", "--gpu", "rtx4090:1", "--memory", "60000", code=1)
    assert "no RTX4090 node has 60000 GiB of memory; the largest has" in out, out
    out = cli("instances", "create", "--gpu", "rtx4090:1", "--cpus", "1000", code=1)
    assert "no RTX4090 node has 1000 CPUs; the largest has" in out, out
    out = cli("instances", "create", "--gpu", "h100:9", code=1)
    assert "at most 8 × H100 per node" in out or "largest H100 node has 8" in out, out
    out = cli("instances", "create", "--gpu", "h100:2", "--gpu-milli", "500", code=2)
    assert "h100:2" in out and "500" in out, out
    out = cli("instances", "create", "--gpu", "h100", "--max-price", "1.20", code=1)
    assert "max_price 1.20" in out and "on-demand" in out, out
    assert _counts(server) == before, "a refused request created something"


def test_a_fraction_that_fits_is_created(server: Server, cli: Callable[..., str]) -> None:
    inst = json.loads(cli("instances", "create", "--gpu", "h100", "--gpu-milli", "500", "--json"))
    assert inst["gpu_milli"] == 500 and inst["gpu_count"] == 0, inst


def test_waiting_work_says_why_in_json_and_in_the_table(server: Server, cli: Callable[..., str]) -> None:
    blocker = server.post("/v1/jobs", {"resources": {"accelerators": "Ascend-910B:8"}, "run": "sleep 300"}, expect=201).json()
    wait_state(server, "job", blocker["id"], ("running",))
    waits = server.post("/v1/jobs", {"resources": {"accelerators": "Ascend-910B:1"}, "run": "true"}, expect=201).json()
    listed = wait_until(
        lambda: (
            (j := {r["id"]: r for r in json.loads(cli("jobs", "list", "--json"))})[waits["id"]]["waiting"]["code"] == "capacity"
            and j
        )
    )
    assert listed[waits["id"]]["waiting"]["detail"] == "gpu", listed[waits["id"]]
    assert listed[blocker["id"]]["waiting"] is None, listed[blocker["id"]]
    table = cli("jobs", "list")
    assert "WHY" in table and "capacity: gpu" in table, table
    server.post(f"/v1/jobs/{waits['id']}/cancel", expect=200)
    server.post(f"/v1/jobs/{blocker['id']}/cancel", expect=200)
    wait_state(server, "job", blocker["id"], ("cancelled",))


def test_a_fraction_without_a_model_shows_the_model_and_node_it_landed_on(server: Server, cli: Callable[..., str]) -> None:
    inst = json.loads(cli("instances", "create", "--gpu-milli", "500", "--json"))
    assert inst["waiting"] is None or inst["waiting"]["code"] in ("scheduling", "capacity"), inst
    running = wait_state(server, "instance", inst["id"], ("running",))
    (alloc,) = running["allocations"]
    (row,) = [r for r in json.loads(cli("instances", "list", "--json")) if r["id"] == inst["id"]]
    assert row["waiting"] is None, row
    table = cli("instances", "list")
    assert f"{alloc['gpu_model']} x 0.5" in table and alloc["node"] in table, table
    assert "any x 0.5" not in table, table
