"""Prepaid means prepaid (issue 12): a tenant an operator creates pays in advance.

Against the in-process server (app, control loop, local backend) on SQLite and
PostgreSQL: a zero balance rents nothing (CLI and API, nothing created), running work
that spends the balance gets a notice and then stops with nothing lost, a top-up
brings it back, and the operator's own tenant stays post-paid.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from tests.control.control_helpers import Server, wait_state, wait_until
from tests.event_helpers import events_text

# Counts steps; a USR1 (the notice) writes a checkpoint, written aside and renamed.
JOB = (
    'ckpt="$SUANLI_CHECKPOINT_DIR/step"; step=$(cat "$ckpt" 2>/dev/null || echo 0); '
    'trap \'echo "$step" > "$ckpt.new"; mv "$ckpt.new" "$ckpt"\' USR1; trap \'exit 0\' TERM; '
    'echo "start from=$step resume=${SUANLI_RESUME_FROM:-none}" >> "$SUANLI_CHECKPOINT_DIR/log"; '
    "while true; do step=$((step + 1)); sleep 0.1; done"
)


def member(server: Server, tenant: str, funds: str | None = None) -> str:
    server.post("/v1/tenants", {"name": tenant}, expect=201)
    if funds:
        server.post("/v1/billing/topups", {"tenant": tenant, "amount": funds}, expect=201)
    return server.post("/v1/users", {"name": f"{tenant}-renter", "tenant": tenant}, expect=201).json()["token"]


def as_(server: Server, token: str, method: str, path: str, body: dict | None = None):  # type: ignore[no-untyped-def]
    return server.http.request(method, path, json=body, headers={"Authorization": f"Bearer {token}"})


def test_a_new_tenant_with_no_balance_rents_nothing(server: Server, cli: Callable[..., str]) -> None:
    renter = member(server, "lab")
    out = cli("instances", "create", "--gpu", "h100:1", code=1, token=renter)
    out = out.replace("\n", "")
    assert "prepaid balance ¥0.00 leaves ¥0.00;" in out and "top up" in out, out
    assert "this work costs ¥19.12/h, its first 6-second unit ¥0.031871" in out, out  # the H100 and its 10-GiB disk
    r = as_(server, renter, "POST", "/v1/jobs", {"run": "true", "resources": {"accelerators": "RTX4090:1"}})
    assert r.status_code == 402 and r.json()["error"]["code"] == "insufficient_funds", r.text
    assert as_(server, renter, "GET", "/v1/instances").json() == [] and as_(server, renter, "GET", "/v1/jobs").json() == []
    terms = json.loads(cli("terms", "show", "--json", token=renter))
    assert terms["terms"] == "prepaid" and terms["left"] == 0.0
    # the operator's own tenant is post-paid: the quick start works with no top-up
    assert json.loads(cli("terms", "show", "--json"))["terms"] == "postpaid"
    server.post("/v1/instances", {"gpu_model": "H100", "gpu_count": 1}, expect=201)
    # a top-up covers the first unit: now it may rent
    cli("topup", "lab", "5")
    created = json.loads(cli("instances", "create", "--gpu", "rtx4090:1", "--json", token=renter))
    assert created["state"] in ("pending", "running")


def test_only_operators_set_terms_and_members_set_their_alert(server: Server, cli: Callable[..., str]) -> None:
    renter = member(server, "lab", funds="10")
    assert "only operators" in cli("terms", "set", "--postpaid", code=1, token=renter)
    assert "credit limit" in cli("terms", "set", "--tenant", "lab", "--credit", "0", code=1)
    mine = json.loads(cli("terms", "set", "--low-balance", "8", "--json", token=renter))
    assert mine["terms"] == "prepaid" and mine["low_balance"] == 8.0
    credit = json.loads(cli("terms", "set", "--tenant", "lab", "--credit", "100", "--json"))
    assert credit["terms"] == "credit" and credit["left"] == 110.0
    # the storage debt limit (tests/billing/test_storage_debt.py): operators only, never negative
    assert mine["storage_debt_limit"] == 10.0  # the default
    assert "only operators" in cli("terms", "set", "--storage-debt-limit", "1000", code=1, token=renter)
    assert "negative amount" in cli("terms", "set", "--tenant", "lab", "--storage-debt-limit", "-1", code=1)
    text = cli("terms", "set", "--tenant", "lab", "--storage-debt-limit", "3")
    assert "stopped disks may run 3.00 into debt" in text, text


def test_running_work_that_spends_the_balance_is_noticed_then_stopped_with_nothing_lost(server: Server) -> None:
    # ¥0.04 buys ~7.5 s of one H100 at ¥19.07/h (its first unit is ¥0.031778); then a 1-s grace
    renter = member(server, "lab", funds="0.04")
    server.ctx.db  # noqa: B018
    r = server.http.put("/v1/billing/terms", json={"tenant": "lab", "grace_s": 1}, headers=server.headers)
    assert r.status_code == 200, r.text
    job = as_(
        server,
        renter,
        "POST",
        "/v1/jobs",
        {"run": JOB, "checkpoint_dir": "ckpt", "resources": {"accelerators": "H100:1"}},
    )
    assert job.status_code == 201, job.text
    jid = job.json()["id"]
    wait_state(server, "job", jid, ("running",))
    events = lambda: server.get("/v1/events", params={"kind": "job", "object_id": jid})  # noqa: E731
    wait_until(lambda: any(e["to_state"] == "requeued" for e in events()), 40)
    noticed = [e for e in events() if "prepaid balance spent" in (e["message"] or "")]
    assert noticed, events_text(events())
    j = wait_state(server, "job", jid, ("queued",))
    log = server.data_dir / "checkpoints" / f"job-{jid}" / "ckpt"
    assert int((log / "step").read_text()) > 0  # the notice let it checkpoint
    time.sleep(0.5)
    assert server.get(f"/v1/jobs/{jid}")["state"] == "queued"  # held while nothing is left
    held = server.get(f"/v1/jobs/{jid}")
    assert "prepaid balance" in (held.get("reason") or held.get("waiting_reason") or json.dumps(held)), held
    assert held["waiting"] is None or held["waiting"]["code"] in ("balance", "scheduling"), held
    assert not [a for a in j.get("allocations", []) if a.get("ended_at") is None]
    # a top-up: it resumes from its checkpoint
    server.post("/v1/billing/topups", {"tenant": "lab", "amount": "10"}, expect=201)
    wait_state(server, "job", jid, ("running",))
    starts = wait_until(lambda: [x for x in (log / "log").read_text().splitlines() if x.startswith("start")][1:], 20)
    assert "resume=none" not in starts[0] and int(starts[0].split("from=")[1].split()[0]) > 0


def test_an_instance_out_of_funds_stops_keeps_its_disk_and_starts_after_a_top_up(server: Server) -> None:
    renter = member(server, "lab", funds="0.04")
    assert server.http.put("/v1/billing/terms", json={"tenant": "lab", "grace_s": 1}, headers=server.headers).status_code == 200
    r = as_(server, renter, "POST", "/v1/instances", {"gpu_model": "H100", "gpu_count": 1, "disk_gib": 1})
    assert r.status_code == 201, r.text
    iid = r.json()["id"]
    wait_state(server, "instance", iid, ("running",))
    disk = server.data_dir / "disks" / f"instance-{iid}"  # its /workspace (the process runtime: a host directory)
    (disk / "note").write_text("kept")
    stopped = wait_state(server, "instance", iid, ("stopped",), timeout_s=40)
    assert "disk is kept" in stopped["reason"] and "prepaid balance spent" in stopped["reason"], stopped
    again = as_(server, renter, "POST", f"/v1/instances/{iid}/start")
    assert again.status_code == 402 and "prepaid balance" in again.json()["error"]["message"], again.text
    server.post("/v1/billing/topups", {"tenant": "lab", "amount": "10"}, expect=201)
    assert as_(server, renter, "POST", f"/v1/instances/{iid}/start").status_code == 200
    assert (disk / "note").read_text() == "kept"
    wait_state(server, "instance", iid, ("running",))
    assert (disk / "note").read_text() == "kept"
