"""The same spot reclaim and node failover on the embedded local backend (no Slurm needed).

Two local nodes with declared (virtual) GPUs; "node down" on the local backend is the
node marked down (by an operator, or by a lost heartbeat).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from suanli.backends.base import BackendError, Handle
from suanli.control import nodes
from suanli.db.models import Job
from suanli.inventory import Inventory, NodeDecl
from tests.event_helpers import events_text
from tests.platform_helpers import ADMIN, Platform, make_platform

# A periodic checkpoint is written aside and renamed: a kill mid-write must leave the last
# whole one, not an empty file (read back as "start from=" with no step: seen under load).
# The traps are set before the start line: a test that waits for the line may send the notice at once.
WORKLOAD = (
    'ckpt="$SUANLI_CHECKPOINT_DIR/step"; log="$SUANLI_CHECKPOINT_DIR/log"; step=$(cat "$ckpt" 2>/dev/null || echo 0); '
    'trap \'echo "$step" > "$ckpt"; echo "USR1 checkpoint=$step deadline=$(cat $SUANLI_PREEMPT_DEADLINE_FILE) at=$(date +%s.%N)" >> "$log"\' USR1; '
    'trap \'echo "TERM at=$(date +%s.%N)" >> "$log"; exit 0\' TERM; '
    'echo "start from=$step resume=${SUANLI_RESUME_FROM:-none} node=$SUANLI_NODE_NAME" >> "$log"; '
    'while true; do step=$((step + 1)); [ $((step % 3)) = 0 ] && [ -n "${PERIODIC:-}" ] && echo "$step" > "$ckpt.new" && mv "$ckpt.new" "$ckpt"; sleep 0.1; done'
)


@pytest.fixture
def platform(db_url: str, tmp_path: Path) -> Iterator[Platform]:
    """Two local nodes, on SQLite and on PostgreSQL (``db_url``)."""
    inv = Inventory(
        nodes=[NodeDecl(name=f"local{i}", gpu_model="H100", gpu_count=4, cpu_cores=16, memory_gib=64) for i in (1, 2)]
    )
    p = make_platform(tmp_path / "data", {}, inv, notice_s=2.0, db_url=db_url)
    try:
        yield p
    finally:
        p.close()


def log_lines(p: Platform, job_id: int) -> list[str]:
    path = p.data_dir / "checkpoints" / f"job-{job_id}" / "ckpt" / "log"
    return path.read_text().splitlines() if path.exists() else []


def starts(p: Platform, job_id: int) -> list[str]:
    return [x for x in log_lines(p, job_id) if x.startswith("start")]


def test_local_node_down_fails_over_from_the_checkpoint(platform: Platform) -> None:
    p = platform
    job = p.submit(name="fo", resources={"accelerators": "H100:1"}, run=WORKLOAD, checkpoint_dir="ckpt", envs={"PERIODIC": "1"})
    first = p.until(lambda: starts(p, job), 20, "job running")[0]
    node = first.split("node=")[1]
    time.sleep(0.8)
    t0 = time.monotonic()
    nodes.set_state(p.db, ADMIN, node, "down")
    resumed = p.until(lambda: starts(p, job)[1:], 20, "resumed on the other node")[0]
    print(f"local failover: {time.monotonic() - t0:.2f}s")
    assert "node=local" in resumed and f"node={node}" not in resumed
    assert int(resumed.split("from=")[1].split()[0]) > 0
    assert [e.to_state for e in p.events("job", job)][-3:] == ["requeued", "queued", "running"], events_text(p.events("job", job))


def test_a_failed_stop_keeps_the_job_and_its_gpus_until_a_stop_succeeds(platform: Platform) -> None:
    """Fault injection (named as such): the real local backend's stop raises twice, as a
    Slurm controller that does not answer scancel would."""
    p = platform
    backend = p.loop.backends["local"]
    real_stop, failures = backend.stop, []

    def flaky_stop(handle, grace_s=10.0):  # type: ignore[no-untyped-def]
        if len(failures) < 2:
            failures.append(handle.key)
            raise BackendError("injected: the controller did not answer")
        return real_stop(handle, grace_s)

    backend.stop = flaky_stop  # type: ignore[method-assign]
    job = p.submit(name="fo", resources={"accelerators": "H100:1"}, run=WORKLOAD, checkpoint_dir="ckpt", envs={"PERIODIC": "1"})
    node = p.until(lambda: starts(p, job), 20, "job running")[0].split("node=")[1]
    time.sleep(0.5)
    nodes.set_state(p.db, ADMIN, node, "down")
    p.tick()
    assert failures and p.state(job, "running") and [p.node_name(a.node_id) for a in p.allocations(job)] == [node]
    resumed = p.until(lambda: starts(p, job)[1:], 20, "resumed on the other node once a stop succeeded")[0]
    assert len(failures) == 2 and f"node={node}" not in resumed
    assert [e.to_state for e in p.events("job", job)][-3:] == ["requeued", "queued", "running"], events_text(p.events("job", job))


def test_failover_without_checkpoint_dir_fails_the_job(platform: Platform) -> None:
    p = platform
    job = p.submit(name="nockpt", resources={"accelerators": "H100:1"}, run="sleep 30")
    p.until(lambda: p.state(job, "running"), 20, "job running")
    node = p.node_name(p.allocations(job)[0].node_id)
    nodes.set_state(p.db, ADMIN, node, "down")
    failed = p.until(lambda: p.state(job, "failed"), 20, "job failed")
    assert "no checkpoint_dir" in failed.reason and p.allocations(job) == []


def test_local_spot_instance_is_preempted_after_its_notice_and_starts_again(platform: Platform) -> None:
    from suanli.control import instances
    from suanli.db.models import Instance

    p = platform
    p.only_nodes({"local1"})
    inst = instances.create(p.db, ADMIN, instances.InstanceRequest("spot-box", "H100", 4, 0, None, None, None, 10, "spot")).id

    def row() -> Instance:
        with p.db.transaction() as s:
            return s.get(Instance, inst)  # type: ignore[return-value]

    p.until(lambda: row().state == "running", 20, "instance running")
    task_dir = Path(row().handles[0]["data"]["dir"])
    urgent = p.submit(name="urgent", resources={"accelerators": "H100:4"}, run="sleep 0.5")
    deadline = p.until(
        lambda: (task_dir / "preempt_deadline").exists() and int((task_dir / "preempt_deadline").read_text()), 15, "deadline file"
    )
    assert row().state == "running"  # the notice does not kill the instance's keeper
    assert deadline >= time.time() + 0.5
    # what the renter runs in the instance from now on has the deadline in its environment
    said = p.loop.backends["local"].exec(Handle.from_json(row().handles[0]), "echo $SUANLI_PREEMPT_DEADLINE")
    assert said.output.strip() == str(deadline)
    p.until(lambda: p.state(urgent, "running", "succeeded"), 30, "on-demand job placed")
    p.until(lambda: p.state(urgent, "succeeded"), 30, "on-demand job done")
    p.until(lambda: row().state == "running", 30, "instance running again")
    states = [e.to_state for e in p.events("instance", inst)]
    assert states == ["pending", "running", "noticed", "preempted", "pending", "running"], events_text(p.events("instance", inst))


def test_local_spot_job_reclaimed_with_notice_checkpoint_and_resume(platform: Platform) -> None:
    p = platform
    p.only_nodes({"local1"})
    spot = p.submit(name="spot", resources={"accelerators": "H100:4", "priority": "spot"}, run=WORKLOAD, checkpoint_dir="ckpt")
    p.until(lambda: starts(p, spot), 20, "spot running")
    time.sleep(0.5)
    urgent = p.submit(name="urgent", resources={"accelerators": "H100:2"}, run="sleep 1")
    noticed = p.until(lambda: [e for e in p.events("job", spot) if e.to_state == "noticed"], 15, "notice")[0]
    told = p.until(lambda: [x for x in log_lines(p, spot) if x.startswith("USR1")], 15, "notice in the workload")[0]
    checkpoint = int(told.split("checkpoint=")[1].split()[0])
    assert checkpoint > 0 and int(told.split("deadline=")[1].split()[0]) >= time.time() - 1
    p.until(lambda: p.state(urgent, "succeeded"), 30, "on-demand job done")
    p.until(lambda: starts(p, spot)[1:], 30, "spot resumed")
    lines = log_lines(p, spot)
    assert starts(p, spot)[1].startswith(f"start from={checkpoint} resume={p.data_dir}/checkpoints/job-{spot}/ckpt")
    term = [x for x in lines if x.startswith("TERM")]
    assert term, lines
    term_at = float(term[0].split("at=")[1])
    # TERM after the notice, and not before the deadline promised with it
    assert float(told.split("at=")[1]) < term_at and term_at >= noticed.ts.timestamp() + 2 - 0.25, lines
    # the loop records "running" after the task has started (and written its start line)
    states = p.until(lambda: (s := [e.to_state for e in p.events("job", spot)])[5:] and s, 10, "the resume recorded")
    assert states[:6] == ["queued", "running", "noticed", "requeued", "queued", "running"], events_text(p.events("job", spot))


def test_a_spot_job_that_leaves_during_its_notice_is_requeued_and_makes_room_at_once(platform: Platform) -> None:
    """The protocol a renter is told: checkpoint on USR1, then exit. The job was reclaimed,
    not finished: it is requeued (never 'succeeded'), and the on-demand job it made way for
    starts when it exits, not when the notice would have run out."""
    p = platform
    p.loop.reclaim.notice_s = 60.0
    p.only_nodes({"local1"})
    leaves = (
        'ckpt="$SUANLI_CHECKPOINT_DIR/step"; echo "start from=$(cat "$ckpt" 2>/dev/null || echo 0)" >> "$SUANLI_CHECKPOINT_DIR/log"; '
        "trap 'echo 7 > \"$ckpt\"; exit 0' USR1; while true; do sleep 0.1; done"
    )
    spot = p.submit(name="polite", resources={"accelerators": "H100:4", "priority": "spot"}, run=leaves, checkpoint_dir="ckpt")
    p.until(lambda: starts(p, spot), 20, "spot running")
    naive = p.submit(name="naive", resources={"accelerators": "H100:1", "priority": "spot"}, run="sleep 300")
    t0 = time.monotonic()
    urgent = p.submit(name="urgent", resources={"accelerators": "H100:4"}, run="sleep 1")
    p.until(lambda: p.state(urgent, "running", "succeeded"), 30, "on-demand job placed once the spot job left")
    assert time.monotonic() - t0 < 30  # well inside the 60 s notice
    states = [e.to_state for e in p.events("job", spot)]
    assert states[:5] == ["queued", "running", "noticed", "requeued", "queued"], events_text(p.events("job", spot))
    requeued = next(e for e in p.events("job", spot) if e.to_state == "requeued")
    assert "ended during its notice" in requeued.message, requeued
    p.until(lambda: p.state(urgent, "succeeded"), 30, "on-demand job done")
    assert p.until(lambda: starts(p, spot)[1:], 30, "spot resumed")[0] == "start from=7"
    assert "succeeded" not in states and p.state(naive, "running", "queued")  # the 1-GPU one was not needed


def test_a_spot_job_killed_by_the_notice_itself_is_requeued_not_failed(platform: Platform) -> None:
    """A workload that does not handle USR1 dies of it; that is still a reclaim."""
    p = platform
    p.loop.reclaim.notice_s = 60.0
    p.only_nodes({"local1"})
    spot = p.submit(name="naive", resources={"accelerators": "H100:4", "priority": "spot"}, run="sleep 300")
    p.until(lambda: p.state(spot, "running"), 20, "spot running")
    # The notice must find the workload's own process: one sent while the task's shells still
    # start is theirs (they trap it), and the workload, started after it, runs to the deadline.
    p.until(lambda: group_runs(p.job(spot), "sleep"), 20, "the spot job's sleep started")
    urgent = p.submit(name="urgent", resources={"accelerators": "H100:4"}, run="sleep 0.5")
    p.until(lambda: p.state(urgent, "succeeded"), 40, "on-demand job done")
    p.until(lambda: p.state(spot, "running"), 30, "spot running again")
    # the loop records "running" after the task has started (and written its start line)
    states = p.until(lambda: (s := [e.to_state for e in p.events("job", spot)])[5:] and s, 10, "the resume recorded")
    assert states[:6] == ["queued", "running", "noticed", "requeued", "queued", "running"], events_text(p.events("job", spot))
    assert "starts over" in [e.message for e in p.events("job", spot)][4], events_text(p.events("job", spot))


def group_runs(job: Job, program: str) -> bool:
    """Whether a process named ``program`` runs in the process group of the job's (first) task."""
    pgid = (job.handles or [{}])[0].get("data", {}).get("pgid")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)
            name, pgrp = fields[0].split("(", 1)[1], int(fields[1].split()[2])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if pgrp == pgid and name == program:
            return True
    return False


def test_an_on_demand_gang_gets_spot_work_reclaimed_on_as_many_nodes_as_it_needs(platform: Platform) -> None:
    p = platform
    spots = [
        p.submit(name=f"spot{i}", resources={"accelerators": "H100:3", "priority": "spot"}, run=WORKLOAD, checkpoint_dir="ckpt")
        for i in (1, 2)
    ]
    p.until(lambda: all(p.state(j, "running") for j in spots), 20, "spot work on both nodes")
    assert {p.node_name(p.allocations(j)[0].node_id) for j in spots} == {"local1", "local2"}
    gang = p.submit(name="gang", num_nodes=2, resources={"accelerators": "H100:2"}, run="sleep 1")
    p.until(lambda: p.state(gang, "running", "succeeded"), 40, "the gang placed on both nodes")
    for j in spots:
        noticed = next(e for e in p.events("job", j) if e.to_state == "noticed")
        assert f"spot reclaim for job-{gang} on " in noticed.message
    assert sorted(p.node_name(a.node_id) for a in p.allocations(gang, active=False)) == ["local1", "local2"]
    p.until(lambda: p.state(gang, "succeeded"), 30, "the gang done")
    p.until(lambda: all(p.state(j, "running") for j in spots), 30, "spot work resumed")


def test_no_notice_when_the_whole_gang_cannot_be_made_to_fit(platform: Platform) -> None:
    p = platform
    spot = p.submit(name="spot", resources={"accelerators": "H100:3", "priority": "spot"}, run=WORKLOAD, checkpoint_dir="ckpt")
    p.until(lambda: p.state(spot, "running"), 20, "spot running")
    node = p.node_name(p.allocations(spot)[0].node_id)
    other = next(n for n in ("local1", "local2") if n != node)
    hog = p.submit(name="hog", resources={"accelerators": "H100:4"}, run="sleep 60")  # on-demand: never a victim
    p.until(lambda: p.state(hog, "running"), 20, "on-demand job on the other node")
    assert p.node_name(p.allocations(hog)[0].node_id) == other
    gang = p.submit(name="gang", num_nodes=2, resources={"accelerators": "H100:2"}, run="sleep 1")
    for _ in range(20):
        p.tick()
    assert p.state(gang, "queued") and p.state(spot, "running")
    assert "noticed" not in [e.to_state for e in p.events("job", spot)], events_text(p.events("job", spot))
