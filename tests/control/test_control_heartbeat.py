"""Node liveness from heartbeats: the rules on a real database, then the whole path with
a real server process and real agent processes (``suanli nodes heartbeat``), one of
them killed mid-job."""

from __future__ import annotations

import signal
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from suanli.control import heartbeat, nodes
from suanli.control.auth import Principal
from suanli.db.clock import utcnow
from suanli.db.models import Event
from suanli.db.session import Database
from suanli.errors import Forbidden, NotFound
from suanli.inventory import Inventory, NodeDecl
from tests.control.control_helpers import ServerProcess, cli_command, free_port, wait_until

ADMIN = Principal(user_id=1, tenant_id=1, name="admin", role="admin")
OPERATOR = Principal(user_id=2, tenant_id=1, name="ops", role="operator")
MEMBER = Principal(user_id=3, tenant_id=1, name="renter", role="member")


@pytest.fixture
def db(db_url: str) -> Database:
    d = Database(db_url)
    d.migrate()
    nodes.register(
        d,
        None,
        Inventory(nodes=[NodeDecl(name=n, gpu_model="H100", gpu_count=2, cpu_cores=8, memory_gib=32) for n in ("a", "b", "c")]),
        lambda: [],
    )
    return d


def state(db: Database, name: str) -> tuple[str, object]:
    row = next(r for r, _ in nodes.list_nodes(db) if r.name == name)
    return row.state, row.heartbeat_at


def node_events(db: Database, name: str) -> list[tuple[str, str]]:
    node_id = next(r.id for r, _ in nodes.list_nodes(db) if r.name == name)
    with db.sessions() as s:
        return [(e.to_state, e.message) for e in s.query(Event).filter_by(kind="node", object_id=node_id).order_by(Event.id)]


def test_only_nodes_that_sent_a_heartbeat_are_watched(db: Database) -> None:
    t0 = utcnow()
    heartbeat.beat(db, OPERATOR, "a", now=t0)
    assert heartbeat.expire(db, 10, now=t0 + timedelta(seconds=9)) == []
    assert heartbeat.expire(db, 10, now=t0 + timedelta(seconds=11)) == ["a"]  # b and c never reported
    assert [state(db, n)[0] for n in "abc"] == ["down", "ready", "ready"]
    assert heartbeat.expire(db, 10, now=t0 + timedelta(seconds=30)) == []  # down once, one event
    to, msg = node_events(db, "a")[-1]
    assert to == "down" and msg.startswith("heartbeat: none from a for 11.0s")


def test_a_heartbeat_revives_only_what_a_lost_heartbeat_took_down(db: Database) -> None:
    t0 = utcnow()
    for n in ("a", "b"):
        heartbeat.beat(db, OPERATOR, n, now=t0)
    assert heartbeat.expire(db, 5, now=t0 + timedelta(seconds=6)) == ["a", "b"]
    nodes.set_state(db, ADMIN, "b", "cordoned")  # the operator takes over b
    heartbeat.beat(db, OPERATOR, "a", now=t0 + timedelta(seconds=7))
    heartbeat.beat(db, OPERATOR, "b", now=t0 + timedelta(seconds=7))
    assert state(db, "a")[0] == "ready" and state(db, "b")[0] == "cordoned"
    nodes.set_state(db, ADMIN, "c", "down")
    heartbeat.beat(db, OPERATOR, "c", now=t0 + timedelta(seconds=7))
    assert state(db, "c")[0] == "down"  # an operator's down stays down
    assert node_events(db, "a")[-1] == ("ready", "heartbeat: a reports again")


def test_heartbeats_need_an_operator_and_a_known_node(db: Database) -> None:
    with pytest.raises(Forbidden):
        heartbeat.beat(db, MEMBER, "a")
    with pytest.raises(NotFound):
        heartbeat.beat(db, OPERATOR, "nope")
    assert state(db, "a") == ("ready", None)


# -- the whole path --------------------------------------------------------------------

# A periodic checkpoint is written aside and renamed: a kill mid-write must leave the last
# whole one, not an empty file (read back as "start from=" with no step: seen under load).
CHECKPOINTING = (
    'ckpt="$SUANLI_CHECKPOINT_DIR/step"; log="$SUANLI_CHECKPOINT_DIR/log"; step=$(cat "$ckpt" 2>/dev/null || echo 0); '
    'echo "start from=$step resume=${SUANLI_RESUME_FROM:-none} node=$SUANLI_NODE_NAME at=$(date +%s.%N)" >> "$log"; '
    'while true; do step=$((step + 1)); [ $((step % 3)) = 0 ] && echo "$step" > "$ckpt.new" && mv "$ckpt.new" "$ckpt"; sleep 0.1; done'
)


def agent(srv: ServerProcess, node: str) -> subprocess.Popen:
    log = open(srv.data_dir / f"agent-{node}.log", "ab")
    return subprocess.Popen(
        cli_command("nodes", "heartbeat", node, "--interval", "0.3"),
        env=srv.cli_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


def test_a_node_whose_agent_dies_fails_its_job_over_from_the_checkpoint(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", None, free_port(), args=("--heartbeat-timeout", "2")).start()
    agents: dict[str, subprocess.Popen] = {}
    try:
        c = srv.client()
        for n in c.nodes():
            if n["name"] not in ("h100-0", "h100-1"):
                c.set_node_state(n["name"], "cordoned")
        agents = {n: agent(srv, n) for n in ("h100-0", "h100-1")}
        wait_until(lambda: all(n["heartbeat_at"] for n in c.nodes() if n["name"] in agents), 20)
        job = c.launch({"name": "fo", "resources": {"accelerators": "H100:2"}, "run": CHECKPOINTING, "checkpoint_dir": "ckpt"})[
            "id"
        ]
        log = srv.data_dir / "checkpoints" / f"job-{job}" / "ckpt" / "log"

        def starts() -> list[str]:
            return [x for x in log.read_text().splitlines() if x.startswith("start")] if log.exists() else []

        first = wait_until(starts, 30)[0]
        lost, spare = ("h100-0", "h100-1") if "node=h100-0" in first else ("h100-1", "h100-0")
        wait_until(lambda: (log.parent / "step").exists() and int((log.parent / "step").read_text()) >= 3, 20)
        agents[lost].send_signal(signal.SIGKILL)  # the node falls silent
        killed_at = time.time()
        resumed = wait_until(lambda: starts()[1:], 30)[0]
        assert f"node={spare}" in resumed and f"resume={log.parent}" in resumed, resumed
        assert int(resumed.split("from=")[1].split()[0]) >= 3  # from the checkpoint, not from zero
        node_id = next(n["id"] for n in c.nodes() if n["name"] == lost)
        down = next(e for e in c.events("node", node_id) if e["to_state"] == "down")
        assert down["message"].startswith(f"heartbeat: none from {lost}")
        # the loop records "running" after the task has started (and written its start line)
        states = wait_until(lambda: (s := [e["to_state"] for e in c.events("job", job)])[4:] and s, 10)
        assert states[:5] == ["queued", "running", "requeued", "queued", "running"], states
        down_at = datetime.fromisoformat(down["ts"]).timestamp()
        running_again = float(resumed.split("at=")[1])
        print(
            f"heartbeat failover: silent->down {down_at - killed_at:.2f}s (timeout 2s), "
            f"down->running elsewhere {running_again - down_at:.2f}s"
        )
        assert c.job(job)["state"] == "running"
        agents[lost] = agent(srv, lost)  # the node comes back
        wait_until(lambda: next(n for n in c.nodes() if n["name"] == lost)["state"] == "ready", 20)
        assert c.events("node", node_id)[-1]["message"] == f"heartbeat: {lost} reports again"
        c.cancel_job(job)
    finally:
        for p in agents.values():
            p.kill()
            p.wait(10)
        srv.stop()
