"""Prices where renters look, through the API and the CLI against the in-process
server (SQLite and PostgreSQL): per GPU model the prices now (``GET /v1/gpus``,
``suanli gpus``), per instance and job the cost so far and the rate now."""

from __future__ import annotations

import json
import time
from pathlib import Path

from suanli.billing.money import div_half_up
from suanli.billing.pricebook import default_book
from tests.control.control_helpers import Server, wait_state, wait_until

MICROS = 1_000_000


def _member(server: Server, name: str = "alice", tenant: str = "lab") -> str:
    server.post("/v1/tenants", {"name": tenant})
    server.post("/v1/billing/topups", {"tenant": tenant, "amount": "1000"}, expect=201)  # prepaid
    return server.post("/v1/users", {"name": name, "tenant": tenant}, expect=201).json()["token"]


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_gpus_show_the_price_books_prices_and_spot_follows_utilisation(server: Server, cli) -> None:  # type: ignore[no-untyped-def]
    book = default_book()
    gpus = {g["model"]: g for g in server.get("/v1/gpus")}
    for model, g in gpus.items():  # the demo inventory: every model priced
        p = book.gpu(model)
        assert g["currency"] == "CNY" and g["priced_as"] == p.model, g
        assert g["price_per_gpu_hour"] == p.on_demand / MICROS, g
        assert g["spot_utilisation_permille"] == 0 and g["spot_price_per_gpu_hour"] == p.spot_floor / MICROS, g
        assert g["monthly_price_per_gpu"] == p.monthly / MICROS and g["reserved_price_per_gpu"] == p.reserved / MICROS, g
        assert g["reserved_term_hours"] == book.reserved_term_hours
        assert g["monthly_price_per_gpu_hour"] == div_half_up(p.monthly, book.hours_per_month) / MICROS
    assert gpus["H100"]["price_per_gpu_hour"] > gpus["H100"]["reserved_price_per_gpu_hour"] > 0  # reserved is cheaper per hour

    # the CLI's JSON is the API's, and its table says the prices
    assert {g["model"]: g for g in json.loads(cli("gpus", "--json"))} == gpus
    table = cli("gpus")
    assert "ON DEMAND/GPU-h" in table and "SPOT NOW/GPU-h" in table and "RESERVED/GPU" in table
    assert "¥18.60" in table and "¥1.96" in table and "/ 1 y" in table, table  # A100 and RTX4090 on demand

    # 4 of the 8 RTX4090 busy: their spot price rises, the others' stay
    total = gpus["RTX4090"]["total"]
    inst = server.post("/v1/instances", {"gpu_model": "RTX4090", "gpu_count": 4}, expect=201).json()
    wait_state(server, "instance", inst["id"], ("running",))
    after = {g["model"]: g for g in server.get("/v1/gpus")}
    util = 4000 * 1000 // (total * 1000)
    assert after["RTX4090"]["spot_utilisation_permille"] == util > 0
    assert after["RTX4090"]["spot_price_per_gpu_hour"] == book.gpu("RTX4090").spot(util) / MICROS
    assert after["RTX4090"]["spot_price_per_gpu_hour"] > gpus["RTX4090"]["spot_price_per_gpu_hour"]
    assert after["RTX4090"]["price_per_gpu_hour"] == gpus["RTX4090"]["price_per_gpu_hour"]  # on demand does not move
    assert after["H100"]["spot_price_per_gpu_hour"] == gpus["H100"]["spot_price_per_gpu_hour"]


def test_a_model_the_book_does_not_price_has_null_prices(server: Server, cli) -> None:  # type: ignore[no-untyped-def]
    inv = {
        "nodes": [
            {"name": "l40s-0", "gpu_model": "L40S", "gpu_count": 4, "gpu_memory_gib": 48, "cpu_cores": 64, "memory_gib": 512}
        ]
    }
    server.post("/v1/nodes", inv, expect=201)
    l40s = next(g for g in server.get("/v1/gpus") if g["model"] == "L40S")
    assert l40s["total"] == 4
    assert all(
        l40s[k] is None
        for k in ("price_per_gpu_hour", "spot_price_per_gpu_hour", "monthly_price_per_gpu", "reserved_price_per_gpu", "currency")
    ), l40s
    assert "not priced" in cli("gpus")


def _cost(server: Server, path: str, token: str) -> dict:
    r = server.http.get(path, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    return r.json()["cost"]


def test_a_running_instance_costs_rated_plus_accruing_and_a_stopped_one_its_disk(server: Server, cli) -> None:  # type: ignore[no-untyped-def]
    book = default_book()
    alice = _member(server)
    inst = server.post("/v1/instances", {"gpu_model": "RTX4090", "gpu_count": 1, "disk_gib": 10}, expect=201, token=alice).json()
    assert inst["cost"]["storage_per_hour"] > 0  # its disk bills from creation, placed or not
    wait_state(server, "instance", inst["id"], ("running",))
    path = f"/v1/instances/{inst['id']}"
    first = _cost(server, path, alice)
    gpu_h, disk_h = book.gpu("RTX4090").on_demand, div_half_up(10 * book.storage, book.hours_per_month)
    assert first["currency"] == "CNY"
    assert round(first["gpu_per_hour"] * MICROS) == gpu_h and round(first["storage_per_hour"] * MICROS) == disk_h, first
    assert first["per_hour_micros"] == gpu_h + disk_h
    assert first["so_far_micros"] == round((first["rated"] + first["accruing"]) * MICROS) > 0, first
    time.sleep(6.1)  # past a 6-second billing unit
    second = _cost(server, path, alice)
    assert second["so_far_micros"] > first["so_far_micros"], (first, second)
    # the listing says the same as the single GET, and the CLI shows it
    [listed] = server.http.get("/v1/instances", headers={"Authorization": f"Bearer {alice}"}).json()
    assert listed["cost"]["so_far_micros"] >= second["so_far_micros"] and listed["cost"]["per_hour"] == second["per_hour"]
    assert json.loads(cli("instances", "list", "--json", token=alice))[0]["cost"]["per_hour_micros"] == gpu_h + disk_h
    table = cli("instances", "list", token=alice)
    assert "COST" in table and "RATE" in table and "¥1.97/h" in table, table
    assert "so far" in cli("instances", "show", str(inst["id"]), token=alice)

    # stopped: no GPUs, the disk still bills at the stopped price
    server.post(f"{path}/stop", token=alice)
    wait_state(server, "instance", inst["id"], ("stopped",))
    stopped = _cost(server, path, alice)
    assert stopped["gpu_per_hour"] == 0, stopped
    assert round(stopped["storage_per_hour"] * MICROS) == div_half_up(10 * book.storage_stopped, book.hours_per_month) > 0
    assert stopped["per_hour"] == stopped["storage_per_hour"]
    assert stopped["so_far_micros"] >= second["so_far_micros"]
    assert "GPUs ¥0.00/h, disk ¥0.01/h" in cli("instances", "show", str(inst["id"]), token=alice)

    # a rating run moves what accrued into what is rated (its GPU records, final once it stopped);
    # what is rated is its usage records' sum, and the total stays rated + accruing
    server.post("/v1/billing/rate", {"cutoff_ms": _now_ms()}, expect=200)
    rated = _cost(server, path, alice)
    usage = [u for u in server.get("/v1/billing/usage", params={"tenant": "lab"}) if u["workload_id"] == inst["id"]]
    assert any(u["kind"] == "gpu" for u in usage), usage
    assert round(rated["rated"] * MICROS) == sum(u["amount_micros"] for u in usage) > 0, (rated, usage)
    assert rated["so_far_micros"] == round((rated["rated"] + rated["accruing"]) * MICROS) >= stopped["so_far_micros"], rated


def test_a_finished_jobs_cost_is_its_usage_records(server: Server, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice = _member(server)
    task = tmp_path / "task.yaml"
    task.write_text("resources: {accelerators: 'H100:2'}\nrun: sleep 1\n")
    job = json.loads(cli("launch", str(task), "--json", token=alice))
    assert job["cost"]["currency"] == "CNY" and job["cost"]["rated"] == 0
    path = f"/v1/jobs/{job['id']}"
    running = wait_until(lambda: (c := _cost(server, path, alice))["gpu_per_hour"] > 0 and c, 20, 0.05)
    assert round(running["gpu_per_hour"] * MICROS) == 2 * default_book().gpu("H100").on_demand, running
    wait_state(server, "job", job["id"], ("succeeded",))
    done = _cost(server, path, alice)
    assert done["per_hour"] == 0 and done["so_far_micros"] > 0, done  # ended: nothing more accrues
    server.post("/v1/billing/rate", {"cutoff_ms": _now_ms()}, expect=200)
    rated = _cost(server, path, alice)
    usage = [
        u
        for u in server.get("/v1/billing/usage", params={"tenant": "lab"})
        if u["workload_kind"] == "job" and u["workload_id"] == job["id"]
    ]
    assert usage and rated["accruing"] == 0 and rated["so_far_micros"] == sum(u["amount_micros"] for u in usage), (rated, usage)
    assert rated["so_far_micros"] == done["so_far_micros"]  # the estimate was what got rated
    [listed] = json.loads(cli("jobs", "list", "--json", token=alice))
    assert listed["cost"]["so_far_micros"] == rated["so_far_micros"]
    assert "COST" in cli("jobs", "list", token=alice)
    assert "so far" in cli("jobs", "show", str(job["id"]), token=alice)
