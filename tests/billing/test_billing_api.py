"""Billing through the API and the CLI, against a real server with its control loop
(SQLite and PostgreSQL): top-up, run an instance, rate, usage, bill, invoice, prices,
grants holding work with a readable reason, quotes."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from tests.control.control_helpers import Server, wait_state, wait_until

runner = CliRunner()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _member(server: Server, name: str = "alice", tenant: str = "lab", funds: str | None = "1000") -> str:
    """A member of a new (prepaid) tenant, topped up with ``funds``."""
    server.post("/v1/tenants", {"name": tenant})
    if funds:
        server.post("/v1/billing/topups", {"tenant": tenant, "amount": funds, "key": f"start-{tenant}"})
    return server.post("/v1/users", {"name": name, "tenant": tenant}, expect=201).json()["token"]


def test_usage_and_bill_end_to_end(server: Server, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice = _member(server, funds=None)
    assert "posted" in cli("topup", "lab", "100", "--key", "wire-7")
    assert "already posted" in cli("topup", "lab", "100", "--key", "wire-7")
    inst = server.post("/v1/instances", {"gpu_model": "RTX4090", "gpu_count": 1, "disk_gib": 10}, expect=201, token=alice).json()
    wait_state(server, "instance", inst["id"], ("running",))
    time.sleep(1.2)
    server.post(f"/v1/instances/{inst['id']}/stop", token=alice)
    wait_state(server, "instance", inst["id"], ("stopped",))
    assert server.post("/v1/billing/rate", {"cutoff_ms": _now_ms() + 3_600_000}).status_code == 422  # never the future
    json.loads(cli("rate", "--cutoff-ms", str(_now_ms()), "--json"))
    usage = json.loads(cli("usage", "--json", token=alice))
    gpu = [u for u in usage if u["kind"] == "gpu"]
    assert len(gpu) == 1
    u = gpu[0]
    assert {"workload_id", "gpu_model", "plan", "started_at", "ended_at", "billed_seconds", "amount", "currency"} <= set(u)
    assert u["workload_id"] == inst["id"] and u["gpu_model"] == "RTX4090" and u["plan"] == "on_demand" and u["currency"] == "CNY"
    assert u["billed_seconds"] % 6 == 0 and u["billed_seconds"] >= 6
    assert u["amount_micros"] == (u["billed_seconds"] // 6 * 1000 * 1_960_000 + 300_000) // 600_000
    bill = json.loads(cli("bill", "--json", token=alice))
    assert {"balance", "current_period_total", "charges", "currency"} <= set(bill)
    assert bill["balance_micros"] == 100_000_000 - bill["current_period_total_micros"]
    assert "accruing, not yet rated" in cli("bill", token=alice) and "RTX4090" in cli("usage", token=alice)
    month = u["period_start"][:7]
    doc = json.loads(cli("invoice", month, "--json", token=alice))
    assert doc["total_micros"] == bill["current_period_total_micros"] and doc["payments"][0]["amount"] == 100_000_000
    out = tmp_path / "inv.html"
    cli("invoice", month, "--html", str(out), token=alice)
    assert "Invoice" in out.read_text() and "RTX4090" in out.read_text()
    # members see only their tenant; operators' commands are refused
    assert "forbidden" in cli("topup", "lab", "5", token=alice, code=1)
    assert json.loads(cli("usage", "--json")) == []  # the admin's own tenant has none


def test_prices_are_versioned_and_validated(server: Server, cli) -> None:  # type: ignore[no-untyped-def]
    before = json.loads(cli("prices", "list", "--json"))
    assert before["version"] == 1
    h100 = next(g for g in before["book"]["gpus"] if g["model"] == "H100 SXM5 80GB")
    assert h100["monthly"].startswith("10560")  # 84,480 / 8 (seed 003)
    assert "version 2" in cli("prices", "set", "RTX4090", "on_demand", "2.10", "--note", "new quote")
    assert "negative" in cli("prices", "set", "--", "RTX4090", "on_demand", "-1", code=1)
    assert "unknown plan" in cli("prices", "set", "RTX4090", "hourly", "1", code=1)
    after = json.loads(cli("prices", "list", "--json"))
    assert after["version"] == 2 and len(after["versions"]) == 2
    assert after["versions"][1]["author"] == "admin" and after["versions"][1]["note"] == "new quote"
    alice = _member(server)
    assert "forbidden" in cli("prices", "set", "H100", "spot", "1", token=alice, code=1)
    assert "RTX 4090" in cli("prices", "list")


def test_grant_holds_work_with_a_reason(server: Server, cli) -> None:  # type: ignore[no-untyped-def]
    alice = _member(server)
    cli("grants", "add", "lab", "--max-gpus", "1", "--gpu", "RTX4090")
    first = server.post("/v1/instances", {"gpu_model": "RTX4090", "gpu_count": 1}, expect=201, token=alice).json()
    wait_state(server, "instance", first["id"], ("running",))
    second = server.post("/v1/instances", {"gpu_model": "RTX4090", "gpu_count": 1}, expect=201, token=alice).json()
    row = wait_until(
        lambda: (o := server.get(f"/v1/instances/{second['id']}")) and "quota" in (o.get("reason") or "") and o, timeout_s=10
    )
    assert row["state"] == "pending" and "quota: 1 of 1 GPUs of grant" in row["reason"]
    assert row["waiting"]["code"] == "quota" and "1 of 1 GPUs" in row["waiting"]["detail"], row
    too_big = server.post("/v1/instances", {"gpu_model": "RTX4090", "gpu_count": 2}, expect=201, token=alice).json()
    failed = wait_state(server, "instance", too_big["id"], ("failed",))
    assert "quota" in failed["reason"] and "allows 1 GPUs at once" in failed["reason"]
    other = server.post("/v1/instances", {"gpu_model": "H100", "gpu_count": 1}, expect=201, token=alice).json()
    assert "no grant covers" in wait_state(server, "instance", other["id"], ("failed",))["reason"]
    server.post(f"/v1/instances/{first['id']}/stop", token=alice)
    wait_state(server, "instance", second["id"], ("running",))  # the quota freed up
    grants = json.loads(cli("grants", "list", "--json", token=alice))
    assert grants[0]["max_gpus"] == 1


def test_quote_before_launch(server: Server, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    task = tmp_path / "task.yaml"
    task.write_text("name: t\nresources: {accelerators: H100:8}\nrun: python train.py\n")
    q = json.loads(cli("quote", str(task), "--hours", "10", "--json"))
    (line,) = q["quotes"]
    assert line["per_hour"] == 8 * 19_066_667 and line["total"] == line["per_hour"] * 10
    spot = tmp_path / "spot.yaml"
    spot.write_text("resources: {accelerators: RTX4090:2, priority: spot}\nrun: x\n")
    s = json.loads(cli("quote", str(spot), "--max-price", "0.40", "--json"))
    assert s["quotes"][0]["plan"] == "spot" and s["quotes"][0]["per_hour"] <= 2 * 400_000
    dry = json.loads(cli("launch", str(task), "--dry-run", "--hours", "10", "--json"))
    assert dry == q and server.get("/v1/jobs") == []  # quoted, nothing submitted
    assert "MAX COST" in cli("launch", str(task), "--dry-run", "--hours", "2")
    assert "max_price" in cli("quote", str(spot), "--max-price", "cheap", code=1)
    anyg = tmp_path / "any.yaml"
    anyg.write_text("resources: {gpu_milli: 500}\nrun: x\n")
    assert len(json.loads(cli("quote", str(anyg), "--json"))["quotes"]) >= 4  # every priced model on offer
