"""Spot reclaim, node failover and server restart through Suanli's control plane on the
real Slurm daemons: the database, the control loop and the reclaimer decide, Slurm runs.

Cluster: node1,node2 = 4 x h100, node3,node4 = 4 x a100. Each test cordons the nodes
it does not use, so placements are forced without mocking anything.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from platform_helpers import Platform, make_platform, restarted
from slurm_helpers import nodes_with_gpu, wait_until

from suanli.backends.slurm import NodeHealth, SlurmBackend, SlurmClient
from suanli.control.launcher import build_specs
from suanli.control.capacity import active_allocations
from suanli.control.scheduling import schedule_pass
from suanli.db.models import Job
from suanli.scheduler import make_policy

pytestmark = pytest.mark.slurm

# Checkpoints its step counter on the notice (USR1), exits on TERM, resumes from the file.
CHECKPOINTING = (
    'ckpt="$SUANLI_CHECKPOINT_DIR/step"; log="$SUANLI_CHECKPOINT_DIR/log"; step=$(cat "$ckpt" 2>/dev/null || echo 0); '
    'echo "start from=$step resume=${SUANLI_RESUME_FROM:-none} node=$SLURMD_NODENAME cvd=$CUDA_VISIBLE_DEVICES" >> "$log"; '
    'trap \'echo "$step" > "$ckpt"; echo "USR1 checkpoint=$step deadline=$(cat $SUANLI_PREEMPT_DEADLINE_FILE) at=$(date +%s.%N)" >> "$log"\' USR1; '
    "trap 'echo \"TERM at=$(date +%s.%N)\" >> \"$log\"; exit 0' TERM; "
    'while true; do step=$((step + 1)); [ $((step % 3)) = 0 ] && [ -n "${PERIODIC:-}" ] && echo "$step" > "$ckpt"; sleep 0.1; done'
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
    spot = p.submit(name="spot", resources={"accelerators": "H100:4", "priority": "spot"}, run=CHECKPOINTING,
                    checkpoint_dir="ckpt")
    p.until(lambda: any(x.startswith("start from=0") for x in log_lines(p, spot)), 30, "spot job running")
    # the allocation records the GPUs Slurm gave the job, which it sees
    cvd = log_lines(p, spot)[0].split("cvd=")[1]
    alloc = p.until(lambda: (a := p.allocations(spot)) and sorted(a[0].gpu_indices) == [0, 1, 2, 3] and a, 10, "synced")
    assert ",".join(map(str, sorted(alloc[0].gpu_indices))) == cvd
    time.sleep(0.5)  # progress worth keeping
    urgent = p.submit(name="urgent", resources={"accelerators": "H100:2"},
                      run='echo "cvd=$CUDA_VISIBLE_DEVICES" > "$SUANLI_WORKDIR/../cvd"; sleep 2')
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
    states = [e.to_state for e in p.events("job", spot)]
    assert states[:6] == ["queued", "running", "noticed", "requeued", "queued", "running"], states
    print(f"reclaim via Suanli on Slurm: notice {lead:.2f}s before TERM; resumed from step {checkpoint}")


def test_node_down_fails_over_to_another_node_from_the_checkpoint(slurm: SlurmClient, platform: Platform) -> None:
    p = platform
    a100 = [n.name for n in nodes_with_gpu(slurm, "a100")[:2]]
    p.only_nodes(set(a100))
    job = p.submit(name="fo", resources={"accelerators": "A100:1"}, run=CHECKPOINTING, checkpoint_dir="ckpt",
                   envs={"PERIODIC": "1"})
    first = p.until(lambda: [x for x in log_lines(p, job) if x.startswith("start")], 30, "job running")[0]
    node = first.split("node=")[1].split()[0]
    other = next(n for n in a100 if n != node)
    time.sleep(0.8)  # a few periodic checkpoints
    try:
        t0 = time.monotonic()
        slurm.set_node_state(node, "down", reason="suanli test: node failure")
        resumed = p.until(lambda: [x for x in log_lines(p, job) if x.startswith("start")][1:], 20, "resumed elsewhere")[0]
        failover_s = time.monotonic() - t0
        assert f"node={other}" in resumed and f"resume={p.data_dir}/checkpoints/job-{job}/ckpt" in resumed
        assert int(resumed.split("from=")[1].split()[0]) > 0  # from the checkpoint, not from scratch
        steps = [(e.kind, e.to_state) for e in p.events() if (e.kind, e.object_id) in (("job", job), ("node", 0)) or e.kind == "node"]
        assert ("node", "down") in steps
        assert [s for k, s in steps if k == "job"][-3:] == ["requeued", "queued", "running"]
        assert p.node_name(p.allocations(job)[0].node_id) == other
        print(f"failover via Suanli on Slurm: node down -> running on {other} from its checkpoint in {failover_s:.2f}s")
    finally:
        slurm.set_node_state(node, "resume")
    wait_until(lambda: slurm.node(node).health == NodeHealth.UP, 30, f"{node} back up")
    p.until(lambda: [e for e in p.events("node") if e.to_state == "ready" and "slurm:" in e.message], 10, "node ready again")


def test_server_restart_mid_job_readopts_and_submits_nothing_twice(
    slurm: SlurmClient, slurm_backend: SlurmBackend, platform: Platform
) -> None:
    p = platform
    p.only_nodes({nodes_with_gpu(slurm, "a100")[-1].name})
    release = p.data_dir.parent / "release"  # the long job runs until the test has restarted the server
    running = p.submit(name="long", resources={"accelerators": "A100:1"},
                       run=f"echo up; while [ ! -e {release} ]; do sleep 0.1; done")
    p.until(lambda: p.state(running, "running"), 30, "job running")
    # a second job whose launch was cut short: the dead server had submitted it but not recorded it
    inflight = p.submit(name="inflight", resources={"accelerators": "A100:1"}, run=f"echo up; while [ ! -e {release} ]; do sleep 0.1; done")
    assert schedule_pass(p.db, make_policy("suanli"), list(p.loop.backends), "dead-server").claimed == [("job", inflight)]
    with p.db.transaction() as s:
        row = s.get(Job, inflight)
        spec = build_specs(s, row, active_allocations(s, row), p.data_dir)[0]
    slurm_backend.submit(spec)
    fresh = SlurmBackend(SlurmClient(slurm_conf=slurm.slurm_conf), slurm_backend.root, tag_prefix=slurm_backend.tag_prefix)
    q = restarted(p, {"slurm": fresh})
    assert q.job(inflight).state == "running" and q.job(running).state == "running"
    release.touch()
    for jid in (running, inflight):
        q.until(lambda jid=jid: q.state(jid, "succeeded"), 30, f"job {jid} done")
    tags = [j.comment for j in slurm.jobs() if j.comment.startswith(fresh.tag_prefix + ":")]
    assert sorted(tags) == sorted({fresh.tag(f"job-{running}-0"), fresh.tag(f"job-{inflight}-0")})  # one Slurm job each
    assert "adopted after a server restart" in [e.message for e in q.events("job", inflight)]
