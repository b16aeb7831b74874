"""Spot bids (``max_price``) through the API and the CLI against the real app and control
loop (SQLite and PostgreSQL): a bad bid, or a bid on work that is not spot, is refused
naming the field and creates nothing; a bid is stored, shown in API outputs and CLI
listings, and a job held by it says why; quotes and ``launch --dry-run`` use the task's
bid."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import func, select
from typer.testing import CliRunner

from suanli.db.models import Allocation, Event, Instance, Job
from tests.control.control_helpers import Server, wait_until

runner = CliRunner()


def counts(srv: Server) -> tuple[int, ...]:
    with srv.ctx.db.sessions() as s:
        return tuple(s.scalar(select(func.count()).select_from(m)) for m in (Instance, Job, Allocation, Event))


def test_bad_bids_are_refused_naming_the_field_and_change_nothing(server: Server, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    before = counts(server)
    spot = {"gpu_model": "H100", "gpu_count": 1, "priority": "spot"}
    for body, needle in [
        ({**spot, "max_price": "cheap"}, "max_price: not a decimal amount: 'cheap'"),
        ({**spot, "max_price": "-1.20"}, "max_price: must not be negative"),
        ({**spot, "max_price": "0"}, "max_price: must be above zero"),
        ({**spot, "max_price": True}, "max_price: expected decimal text"),
        (
            {**spot, "priority": "on-demand", "max_price": "1.20"},
            "max_price: a max_price is a spot bid: only valid with priority spot",
        ),
        ({"gpu_model": "H100", "max_price": "1.20"}, "only valid with priority spot (this request is on-demand)"),
    ]:
        r = server.post("/v1/instances", body)
        assert r.status_code == 422, (body, r.text)
        err = r.json()["error"]
        assert err["code"] == "invalid" and needle in err["message"] and err["fields"] == ["max_price"], (needle, err)
    task = {"run": "true", "resources": {"accelerators": "H100:1", "priority": "spot"}}
    for bid, needle in [("x", "resources.max_price: not a decimal amount"), ("-3", "resources.max_price: must not be negative")]:
        r = server.post("/v1/jobs", {**task, "resources": {**task["resources"], "max_price": bid}})
        assert r.status_code == 422 and needle in r.json()["error"]["message"], r.text
    r = server.post(
        "/v1/jobs", {"run": "true", "resources": {"accelerators": "H100:1", "priority": "reserved", "max_price": "2"}}
    )
    assert r.status_code == 422 and "resources.max_price: a max_price is a spot bid" in r.json()["error"]["message"]
    assert "max_price: must not be negative" in cli(
        "instances", "create", "--gpu", "h100:1", "--priority", "spot", "--max-price=-1", code=1
    )
    assert "only valid with priority spot" in cli("instances", "create", "--gpu", "h100:1", "--max-price", "1.20", code=1)
    bad = tmp_path / "bad.yaml"
    bad.write_text("resources: {accelerators: H100:1, max_price: 1.20}\nrun: x\n")
    assert "resources.max_price" in cli("launch", str(bad), code=1)
    assert "resources.max_price" in cli("launch", str(bad), "--dry-run", code=1)
    od = tmp_path / "od.yaml"
    od.write_text("resources: {accelerators: H100:1}\nrun: x\n")
    assert "max_price: a max_price is a spot bid" in cli("quote", str(od), "--max-price", "1", code=1)
    assert counts(server) == before


def test_bids_are_stored_shown_and_explain_a_wait(server: Server, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inst = server.post(
        "/v1/instances", {"gpu_model": "RTX4090", "gpu_count": 1, "priority": "spot", "max_price": "50"}, expect=201
    ).json()
    assert inst["max_price"] == "50.00" and inst["priority"] == "spot"
    with server.ctx.db.sessions() as s:
        assert s.get(Instance, inst["id"]).max_price_micros == 50_000_000
    running = wait_until(lambda: (o := server.get(f"/v1/instances/{inst['id']}"))["state"] == "running" and o)
    assert running["max_price"] == "50.00"
    with server.ctx.db.sessions() as s:
        assert s.scalar(select(Allocation.max_price_micros).where(Allocation.instance_id == inst["id"])) == 50_000_000
    assert "spot <= 50.00/GPU-h" in cli("instances", "list")
    plain = json.loads(cli("instances", "create", "--gpu", "rtx4090:1", "--priority", "spot", "--max-price", "9.5", "--json"))
    assert plain["max_price"] == "9.50"
    # a bid below the spot price floor never starts: refused at submission, naming the floor
    task = tmp_path / "low.yaml"
    task.write_text("name: low\nresources:\n  accelerators: H100:1\n  priority: spot\n  max_price: 1.5\nrun: 'true'\n")
    out = cli("launch", str(task), "--json", code=1)
    assert "your max_price ¥1.50 is below the spot price floor (H100 ¥3.82 per GPU-h)" in out, out
    # a bid at the floor, below the price counting its own GPU, waits and says why
    task.write_text("name: low\nresources:\n  accelerators: H100:1\n  priority: spot\n  max_price: 3.82\nrun: 'true'\n")
    job = json.loads(cli("launch", str(task), "--json"))
    assert job["max_price"] == "3.82" and job["spec"]["resources"]["max_price"] == "3.82"
    waiting = wait_until(lambda: (o := server.get(f"/v1/jobs/{job['id']}"))["reason"] and o)
    assert waiting["state"] == "queued" and waiting["reason"].startswith("waiting: spot price ¥"), waiting
    assert "for H100 is above your max_price ¥3.82" in waiting["reason"]
    listing = cli("jobs", "list")
    assert "spot <= 3.82/GPU-h" in listing and "max_price" in listing


def test_quotes_use_the_task_s_bid(server: Server, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    task = tmp_path / "spot.yaml"
    task.write_text("resources: {accelerators: RTX4090:2, priority: spot, max_price: '0.40'}\nrun: x\n")
    dry = json.loads(cli("launch", str(task), "--dry-run", "--json"))
    (line,) = dry["quotes"]
    assert line["plan"] == "spot" and line["per_hour"] <= 2 * 400_000 and "max_price ¥0.40" in line["note"]
    assert server.get("/v1/jobs") == []  # quoted, nothing submitted
    same = server.post(
        "/v1/billing/quote",
        {"task": {"run": "x", "resources": {"accelerators": "RTX4090:2", "priority": "spot", "max_price": "0.40"}}},
        expect=200,
    ).json()
    assert same["quotes"] == dry["quotes"]
    other = json.loads(cli("quote", str(task), "--max-price", "0.30", "--json"))  # the command line's bid wins
    assert other["quotes"][0]["per_hour"] == 2 * 300_000 and "max_price ¥0.30" in other["quotes"][0]["note"]
    low = tmp_path / "low.yaml"
    low.write_text("resources: {accelerators: RTX4090:2, priority: spot, max_price: '0.01'}\nrun: x\n")
    (waits,) = json.loads(cli("quote", str(low), "--json"))["quotes"]
    assert waits["per_hour"] == 2 * 10_000 and "above max_price ¥0.01: it would wait" in waits["note"]
    assert "it would wait" in cli("launch", str(low), "--dry-run")
