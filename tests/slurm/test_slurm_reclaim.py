"""Spot reclaim, node failover and server restart through Suanli's control plane on the
real Slurm daemons: the database, the control loop and the reclaimer decide, Slurm runs.

Cluster: node1,node2 = 4 x h100, node3,node4 = 4 x a100. Each test cordons the nodes
it does not use, so placements are forced without mocking anything.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from suanli.backends.base import Handle
from suanli.backends.slurm import NodeHealth, SlurmBackend, SlurmClient
from suanli.control.capacity import active_allocations
from suanli.control.launcher import build_specs
from suanli.control.scheduling import schedule_pass
from suanli.db.models import Gpu, Job, Node
from suanli.scheduler import make_policy
from tests.event_helpers import events_text
from tests.platform_helpers import Platform, make_platform, restarted
from tests.slurm.slurm_helpers import Jobs, cluster_root, nodes_with_gpu, wait_until

pytestmark = pytest.mark.slurm

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm-cluster"

# Checkpoints its step counter on the notice (USR1), exits on TERM, resumes from the file.
# Its periodic (PERIODIC=1) checkpoint is written aside and renamed: a kill mid-write must leave the last
# whole one, not an empty file (read back as "start from=" with no step: seen under load).
# The traps are set before the start line: a test that waits for the line may send the notice at once.
CHECKPOINTING = (
    'ckpt="$SUANLI_CHECKPOINT_DIR/step"; log="$SUANLI_CHECKPOINT_DIR/log"; step=$(cat "$ckpt" 2>/dev/null || echo 0); '
    'trap \'echo "$step" > "$ckpt"; echo "USR1 checkpoint=$step deadline=$(cat $SUANLI_PREEMPT_DEADLINE_FILE) at=$(date +%s.%N)" >> "$log"\' USR1; '
    'trap \'echo "TERM at=$(date +%s.%N)" >> "$log"; exit 0\' TERM; '
    'echo "start from=$step resume=${SUANLI_RESUME_FROM:-none} node=$SLURMD_NODENAME at=$(date +%s.%N) cvd=$CUDA_VISIBLE_DEVICES" >> "$log"; '
    'while true; do step=$((step + 1)); [ $((step % 3)) = 0 ] && [ -n "${PERIODIC:-}" ] && echo "$step" > "$ckpt.new" && mv "$ckpt.new" "$ckpt"; sleep 0.1; done'
)


@pytest.fixture
def slurm_backend(slurm: SlurmClient, tmp_path: Path) -> Iterator[SlurmBackend]:
    tmp_path.chmod(0o777)
    b = SlurmBackend(slurm, tmp_path / "slurm", tag_prefix=f"r{time.time_ns()}", notice_s=3)
    yield b
    for h in b.list_running():
        b.stop(h, grace_s=0)


@pytest.fixture
def platform(slurm_backend: SlurmBackend, tmp_path: Path) -> Iterator[Platform]:
    p = make_platform(tmp_path / "data", {"slurm": slurm_backend}, slurm_backend.discover_inventory(), notice_s=3.0)
    yield p
    p.close()


def ckpt_log(p: Platform, job_id: int) -> Path:
    return p.data_dir / "checkpoints" / f"job-{job_id}" / "ckpt" / "log"


def log_lines(p: Platform, job_id: int) -> list[str]:
    path = ckpt_log(p, job_id)
    return path.read_text().splitlines() if path.exists() else []


def test_spot_job_reclaimed_by_on_demand_with_notice_checkpoint_and_resume(slurm: SlurmClient, platform: Platform) -> None:
    p = platform
    node = nodes_with_gpu(slurm, "h100")[0].name
    p.only_nodes({node})
    spot = p.submit(
        name="spot", resources={"accelerators": "H100:4", "priority": "spot"}, run=CHECKPOINTING, checkpoint_dir="ckpt"
    )
    p.until(lambda: any(x.startswith("start from=0") for x in log_lines(p, spot)), 30, "spot job running")
    # the allocation records the GPUs Slurm gave the job, which it sees
    cvd = log_lines(p, spot)[0].split("cvd=")[1]
    alloc = p.until(lambda: (a := p.allocations(spot)) and sorted(a[0].gpu_indices) == [0, 1, 2, 3] and a, 10, "synced")
    assert ",".join(map(str, sorted(alloc[0].gpu_indices))) == cvd
    time.sleep(0.5)  # progress worth keeping
    urgent = p.submit(
        name="urgent",
        resources={"accelerators": "H100:2"},
        run='echo "cvd=$CUDA_VISIBLE_DEVICES" > "$SUANLI_WORKDIR/../cvd"; sleep 2',
    )
    noticed = p.until(lambda: [e for e in p.events("job", spot) if e.to_state == "noticed"], 15, "notice")[0]
    told = p.until(lambda: [x for x in log_lines(p, spot) if x.startswith("USR1")], 10, "notice in the workload")[0]
    checkpoint = int(told.split("checkpoint=")[1].split()[0])
    deadline = int(told.split("deadline=")[1].split()[0])
    assert checkpoint > 0
    assert abs(deadline - (noticed.ts.timestamp() + 3)) <= 2
    p.until(lambda: p.state(urgent, "running"), 30, "on-demand job running")
    p.until(lambda: p.state(urgent, "succeeded"), 30, "on-demand job done")
    p.until(lambda: len([x for x in log_lines(p, spot) if x.startswith("start")]) == 2, 40, "spot job resumed")
    lines = log_lines(p, spot)
    starts = [x for x in lines if x.startswith("start")]
    assert starts[1].startswith(f"start from={checkpoint} resume={p.data_dir}/checkpoints/job-{spot}/ckpt")
    usr1_at = float(told.split("at=")[1])
    term = [x for x in lines if x.startswith("TERM")]
    assert term, lines
    term_at = float(term[0].split("at=")[1])
    # TERM came after the notice and not before the promised deadline; the lead is the
    # notice minus however long Slurm took to deliver USR1 (measured in BENCHMARKS.md)
    assert usr1_at < term_at, lines
    assert term_at >= noticed.ts.timestamp() + 3 - 0.25, lines
    lead = term_at - usr1_at
    # the loop records "running" after the task has started (and written its start line)
    states = p.until(lambda: (s := [e.to_state for e in p.events("job", spot)])[5:] and s, 10, "the resume recorded")
    assert states[:6] == ["queued", "running", "noticed", "requeued", "queued", "running"], events_text(p.events("job", spot))
    print(f"reclaim via Suanli on Slurm: notice {lead:.2f}s before TERM; resumed from step {checkpoint}")


def checkpointing_job(p: Platform, two_nodes: list[str], accelerators: str) -> tuple[int, str, str]:
    """A periodically checkpointing job on one of ``two_nodes`` (the others cordoned):
    its id, the node it runs on and the spare."""
    p.only_nodes(set(two_nodes))
    job = p.submit(
        name="fo", resources={"accelerators": accelerators}, run=CHECKPOINTING, checkpoint_dir="ckpt", envs={"PERIODIC": "1"}
    )
    first = p.until(lambda: [x for x in log_lines(p, job) if x.startswith("start")], 30, "job running")[0]
    node = first.split("node=")[1].split()[0]
    return job, node, next(n for n in two_nodes if n != node)


def test_node_down_fails_over_to_another_node_from_the_checkpoint(slurm: SlurmClient, platform: Platform) -> None:
    p = platform
    a100 = [n.name for n in nodes_with_gpu(slurm, "a100")[:2]]
    job, node, other = checkpointing_job(p, a100, "A100:1")
    time.sleep(0.8)  # a few periodic checkpoints
    try:
        t0 = time.monotonic()
        slurm.set_node_state(node, "down", reason="suanli test: node failure")
        resumed = p.until(lambda: [x for x in log_lines(p, job) if x.startswith("start")][1:], 20, "resumed elsewhere")[0]
        failover_s = time.monotonic() - t0
        assert f"node={other}" in resumed and f"resume={p.data_dir}/checkpoints/job-{job}/ckpt" in resumed
        assert int(resumed.split("from=")[1].split()[0]) > 0  # from the checkpoint, not from scratch
        steps = [
            (e.kind, e.to_state) for e in p.events() if (e.kind, e.object_id) in (("job", job), ("node", 0)) or e.kind == "node"
        ]
        assert ("node", "down") in steps
        assert [s for k, s in steps if k == "job"][-3:] == ["requeued", "queued", "running"]
        assert p.node_name(p.allocations(job)[0].node_id) == other
        print(f"failover via Suanli on Slurm: node down -> running on {other} from its checkpoint in {failover_s:.2f}s")
    finally:
        slurm.set_node_state(node, "resume")
    wait_until(lambda: slurm.node(node).health == NodeHealth.UP, 30, f"{node} back up")
    p.until(lambda: [e for e in p.events("node") if e.to_state == "ready" and "slurm:" in e.message], 10, "node ready again")


def slurmd_pid(root: Path, node: str) -> int | None:
    """The live slurmd of ``node`` from scripts/slurm-cluster's PID file (None: none runs)."""
    try:
        pid = int((root / "run" / f"slurmd-{node}.pid").read_text())
        return pid if Path(f"/proc/{pid}/comm").read_text().strip() == "slurmd" else None
    except (OSError, ValueError):
        return None


def job_processes(job_id: int) -> list[int]:
    """Processes of a Slurm job on this host: its slurmstepd and everything it started
    (identified by SLURM_JOB_ID in their environment), whichever slurmd is alive."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if (d / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmd = (d / "cmdline").read_bytes()
            env = (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd.startswith(f"slurmstepd: [{job_id}.".encode()) or f"SLURM_JOB_ID={job_id}".encode() in env:
            out.append(int(d.name))
    return out


def restart_slurmd(root: Path, node: str) -> None:
    """Start ``node``'s slurmd again exactly as scripts/slurm-cluster starts it."""
    r = subprocess.run(
        ["bash", str(SCRIPT), "restart-slurmd", node],
        env={**os.environ, "SLURM_ROOT": str(root)},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert r.returncode == 0, f"restart-slurmd {node} failed: {r.stderr}"


def test_killed_slurmd_node_not_responding_fails_over_from_the_checkpoint(
    slurm: SlurmClient, slurm_backend: SlurmBackend, platform: Platform, jobs: Jobs
) -> None:
    """A slurmd that dies outright (SIGKILL): slurmctld finds the node NOT_RESPONDING at
    a failed ping (and DOWN after SlurmdTimeout). Suanli marks the node down saying so,
    stops the job there (scancel at once: the node cannot confirm, so Slurm keeps the job
    COMPLETING) and resumes it on the healthy spare from its checkpoint, submitted once.
    The old job's processes outlive slurmd (slurmstepd is a process of its own); when
    the revived slurmd registers, slurmctld has them killed."""
    p = platform
    root = cluster_root(slurm)
    h100 = [n.name for n in nodes_with_gpu(slurm, "h100")[:2]]
    if len(h100) < 2 or any(slurmd_pid(root, n) is None for n in h100):
        pytest.skip(f"needs two idle h100 nodes whose slurmd scripts/slurm-cluster started (PID files in {root}/run)")
    job, node, spare = checkpointing_job(p, h100, "H100:2")
    node_id = _node_id(p, node)
    old = int(p.job(job).handles[0]["data"]["job_id"])
    # a job Suanli did not fail over, to stop by hand while the node does not respond
    bystander = jobs.submit(name="bystander", node=node, gpu_type="h100", gpu_count=1, command="sleep 600")
    jobs.wait_state(bystander, "RUNNING")
    step = ckpt_log(p, job).parent / "step"
    saved = p.until(lambda: step.exists() and int(step.read_text().strip() or 0), 15, "a checkpoint")
    pid = slurmd_pid(root, node)
    assert pid is not None
    try:
        t_kill = time.time()
        os.kill(pid, signal.SIGKILL)
        down = p.until(lambda: [e for e in p.events("node", node_id) if e.to_state == "down"], 90, f"{node} down")[0]
        detect_s = down.ts.timestamp() - t_kill
        assert down.message == f"slurm: reports {node} DOWN (NOT_RESPONDING)", down.message
        # failed over in the tick that found the node down, not a tick later
        assert [e.to_state for e in p.events("job", job) if e.ts >= down.ts][:2] == ["requeued", "queued"]
        # stopping a job on the silent node does not wait out a grace period no signal can end
        t0 = time.monotonic()
        slurm_backend.stop(Handle("slurm", "bystander", {"job_id": bystander}), grace_s=10)
        stop_s = time.monotonic() - t0
        assert stop_s < 5, f"stop on a NOT_RESPONDING node took {stop_s:.1f}s"
        assert jobs.state(bystander, "COMPLETING", "CANCELLED") or slurm.job(bystander) is None
        resumed = p.until(lambda: [x for x in log_lines(p, job) if x.startswith("start")][1:], 30, "resumed elsewhere")[0]
        assert f"node={spare}" in resumed and f"resume={p.data_dir}/checkpoints/job-{job}/ckpt" in resumed, resumed
        assert int(resumed.split("from=")[1].split()[0]) >= saved  # the latest checkpoint, not from scratch
        failover_s = float(resumed.split("at=")[1].split()[0]) - down.ts.timestamp()
        events = [e for e in p.events("job", job) if e.ts >= down.ts]
        assert [e.to_state for e in events][:3] == ["requeued", "queued", "running"], events_text(events)
        requeued, queued, running = events[:3]
        assert requeued.message == f"node {node} is down" and "resumes from" in queued.message
        assert running.message == f"started on {spare}"
        assert down.ts <= requeued.ts <= queued.ts <= running.ts
        # one allocation, on the spare; nothing left counted on the silent node
        allocs = p.allocations(job)
        assert len(allocs) == 1 and p.node_name(allocs[0].node_id) == spare
        assert _usage(p, node_id) == (0, 0, 0)
        # submitted once more, not twice: one live Slurm job for the task; the old one is over for Slurm
        tagged = [j for j in slurm.jobs() if j.comment == slurm_backend.tag(f"job-{job}-0")]
        live = [j for j in tagged if j.is_active and j.state != "COMPLETING"]
        assert len(live) == 1 and live[0].job_id != old and live[0].node == spare, tagged
        assert all(j.state in ("COMPLETING", "CANCELLED") for j in tagged if j.job_id == old), tagged
        # slurmd's death did not end the old job's processes: they still run on the silent node
        assert job_processes(old), f"expected the orphaned processes of Slurm job {old} on {node}"
        print(
            f"\nslurmd SIGKILL on {node}: node down event (NOT_RESPONDING) after {detect_s:.1f}s; node down -> "
            f"running on {spare} from its checkpoint in {failover_s:.2f}s (workload's first line); "
            f"stop of a job on the silent node {stop_s:.2f}s"
        )
        for e in [down, *events[:3]]:
            print(f"  {e.ts.isoformat(timespec='milliseconds')} {e.kind} {e.from_state} -> {e.to_state}: {e.message}")
    finally:
        if slurmd_pid(root, node) is None:
            t_restart = time.monotonic()
            restart_slurmd(root, node)
            wait_until(lambda: slurm.node(node).health == NodeHealth.UP, 30, f"{node} responding again")
            print(f"  slurmd restarted; {node} up after {time.monotonic() - t_restart:.1f}s")
    # the revived slurmd registered the old jobs' steps; slurmctld had them killed
    for gone in (old, bystander):
        wait_until(lambda gone=gone: not job_processes(gone), 20, f"the processes of Slurm job {gone} on {node} to end")
    wait_until(lambda: slurm.node(node).state == "idle", 20, f"{node} idle")
    p.until(
        lambda: [e for e in p.events("node", node_id) if e.to_state == "ready" and "up again" in e.message],
        15,
        "node ready again",
    )
    assert p.state(job, "running") and p.node_name(p.allocations(job)[0].node_id) == spare
    # Slurm did not start the old job again; it finishes completing on the revived node
    t_done = time.monotonic()
    assert not [j for j in slurm.jobs() if j.job_id == old and j.is_active and j.state != "COMPLETING"]
    wait_until(lambda: not any(j.job_id == old and j.is_active for j in slurm.jobs()), 60, f"Slurm job {old} to complete")
    print(f"  old job {old} completed {time.monotonic() - t_done:.1f}s after the node was ready")


def _node_id(p: Platform, name: str) -> int:
    with p.db.transaction() as s:
        return s.scalars(select(Node.id).where(Node.name == name)).one()


def _usage(p: Platform, node_id: int) -> tuple[int, int, int]:
    """(GPU milli, CPU milli, memory MiB) the database counts as used on a node."""
    with p.db.transaction() as s:
        node = s.get(Node, node_id)
        assert node is not None
        gpus = sum(s.scalars(select(Gpu.used_milli).where(Gpu.node_id == node_id)))
        return gpus, node.cpu_used, node.mem_used


def test_server_restart_mid_job_readopts_and_submits_nothing_twice(
    slurm: SlurmClient, slurm_backend: SlurmBackend, platform: Platform
) -> None:
    p = platform
    p.only_nodes({nodes_with_gpu(slurm, "a100")[-1].name})
    release = p.data_dir.parent / "release"  # the long job runs until the test has restarted the server
    running = p.submit(
        name="long", resources={"accelerators": "A100:1"}, run=f"echo up; while [ ! -e {release} ]; do sleep 0.1; done"
    )
    p.until(lambda: p.state(running, "running"), 30, "job running")
    # a second job whose launch was cut short: the dead server had submitted it but not recorded it
    inflight = p.submit(
        name="inflight", resources={"accelerators": "A100:1"}, run=f"echo up; while [ ! -e {release} ]; do sleep 0.1; done"
    )
    assert schedule_pass(p.db, make_policy("suanli"), list(p.loop.backends), "dead-server", *p.loop.admit()).claimed == [
        ("job", inflight)
    ]
    with p.db.transaction() as s:
        row = s.get(Job, inflight)
        spec = build_specs(s, row, active_allocations(s, row), p.data_dir, p.loop.plane.keyring)[0]
    slurm_backend.submit(spec)
    fresh = SlurmBackend(SlurmClient(slurm_conf=slurm.slurm_conf), slurm_backend.root, tag_prefix=slurm_backend.tag_prefix)
    q = restarted(p, {"slurm": fresh})
    assert q.job(inflight).state == "running" and q.job(running).state == "running"
    release.touch()
    for jid in (running, inflight):
        q.until(lambda jid=jid: q.state(jid, "succeeded"), 30, f"job {jid} done")
    tags = [j.comment for j in slurm.jobs() if j.comment.startswith(fresh.tag_prefix + ":")]
    assert sorted(tags) == sorted({fresh.tag(f"job-{running}-0"), fresh.tag(f"job-{inflight}-0")})  # one Slurm job each
    adopted = q.events("job", inflight)
    assert "adopted after a server restart" in [e.message for e in adopted], events_text(adopted)
