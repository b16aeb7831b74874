"""Real jobs on the real Slurm daemons of ``scripts/slurm-cluster`` (``pytest -m slurm``).

Each test pins its jobs to nodes it discovers, polls with deadlines, and cancels what it
left; nothing here mocks Slurm. Default cluster: node1,node2 = 4 x h100, node3,node4 =
4 x a100, 10 shards per GPU, QOS ``normal`` preempts QOS ``spot``.
"""

from __future__ import annotations

import time

import pytest

from suanli.backends.slurm import NodeHealth, SlurmClient, SlurmError, shards_for_milli
from tests.slurm.slurm_helpers import Jobs, nodes_with_gpu, wait_until

pytestmark = pytest.mark.slurm

# A workload that logs its start, traps the notice (and TERM, which preemption sends right
# after USR1 when GraceTime=0), and otherwise idles in short sleeps.
SPOT_WORKLOAD = (
    "trap 'echo \"USR1 deadline=$(cat $SUANLI_PREEMPT_DEADLINE_FILE 2>/dev/null)\" >> $LOG; exit 0' USR1; "
    "trap 'echo TERM >> $LOG; exit 0' TERM; "
    'echo "start restart=$SUANLI_RESTART_COUNT node=$SLURMD_NODENAME cvd=$CUDA_VISIBLE_DEVICES" >> $LOG; '
    "while true; do sleep 0.2; done"
)


def test_inventory_lists_typed_gpus_and_shards(slurm: SlurmClient) -> None:
    nodes = slurm.nodes()
    assert len(nodes) >= 2
    types = {t for n in nodes for t in n.gpus()}
    assert {"h100", "a100"} <= types
    for n in nodes:
        assert n.health == NodeHealth.UP, n
        assert n.gpu_count >= 2 and n.shards_per_gpu >= 2
        assert n.cpus > 0 and n.memory_mb > 0
        assert {g.type for g in n.gres if g.name == "shard"} == set(n.gpus())


def test_pinned_gpu_job_sees_the_gpus_slurm_allocated(slurm: SlurmClient, jobs: Jobs) -> None:
    node = nodes_with_gpu(slurm, "a100")[-1].name
    job_id = jobs.submit(
        name="pinned",
        node=node,
        gpu_type="a100",
        gpu_count=2,
        command='echo "node=$SLURMD_NODENAME cvd=$CUDA_VISIBLE_DEVICES"; sleep 30',
    )
    job = jobs.wait_state(job_id, "RUNNING")
    assert job.node == node
    indices = job.gpu_indices[node]
    assert len(indices) == 2
    text = jobs.wait_text(jobs.output("pinned", job_id), "cvd=")
    assert f"node={node} cvd={','.join(map(str, indices))}" in text


def test_two_fractional_jobs_share_one_gpu(slurm: SlurmClient, jobs: Jobs) -> None:
    node = nodes_with_gpu(slurm, "h100")[-1]
    shards = shards_for_milli(500, node.shards_per_gpu)  # half a GPU each
    ids = [
        jobs.submit(
            name=f"half{i}",
            node=node.name,
            gpu_type="h100",
            shards=shards,
            command='echo "cvd=$CUDA_VISIBLE_DEVICES shards=$SLURM_SHARDS_ON_NODE"; sleep 30',
        )
        for i in range(2)
    ]
    running = [jobs.wait_state(i, "RUNNING") for i in ids]  # both at once
    gpus = {r.gpu_indices[node.name] for r in running}
    assert len(gpus) == 1 and len(next(iter(gpus))) == 1, gpus
    gpu = next(iter(gpus))[0]
    for name, job_id in zip(("half0", "half1"), ids):
        assert f"cvd={gpu} shards={shards}" in jobs.wait_text(jobs.output(name, job_id), "cvd=")
    assert slurm.node(node.name).shards_used == 2 * shards


def test_usr1_notice_reaches_the_workload_with_its_deadline(slurm: SlurmClient, jobs: Jobs) -> None:
    node = nodes_with_gpu(slurm, "h100")[0].name
    log = jobs.out_dir / "notice.log"
    job_id = jobs.submit(
        name="notice",
        node=node,
        gpu_type="h100",
        gpu_count=1,
        requeue=True,
        notice_s=300,
        command=SPOT_WORKLOAD,
        env={"LOG": str(log), "SUANLI_PREEMPT_DEADLINE_FILE": str(jobs.out_dir / "deadline")},
    )
    jobs.wait_state(job_id, "RUNNING")
    jobs.wait_text(log, "start restart=0")
    sent = time.time()
    slurm.signal(job_id, "USR1", batch_only=True)  # only the batch shell: the wrapper forwards it
    text = jobs.wait_text(log, "USR1")
    deadline = int(text.split("deadline=")[1].split()[0])
    assert sent + 300 - 2 <= deadline <= time.time() + 300 + 1
    assert jobs.wait_state(job_id, "COMPLETED").exit.code == 0


def test_spot_job_preempted_by_slurm_qos_is_told_and_requeued(slurm: SlurmClient, jobs: Jobs) -> None:
    """Slurm's own QOS preemption (a backstop for jobs Suanli did not place).

    With GraceTime=0 Slurm sends the batch shell USR1 and every job process TERM at the
    same moment, so the workload may hear TERM first; what is guaranteed is that the job
    is told (the wrapper logs the notice), requeued, and the on-demand job runs at once.
    """
    node = nodes_with_gpu(slurm, "h100")[0]
    log = jobs.out_dir / "spot.log"
    spot = jobs.submit(
        name="spot",
        node=node.name,
        gpu_type="h100",
        gpu_count=node.gpu_count,
        qos="spot",
        requeue=True,
        notice_s=300,
        command=SPOT_WORKLOAD,
        env={"LOG": str(log)},
    )
    jobs.wait_state(spot, "RUNNING")
    jobs.wait_text(log, "start restart=0")
    t0 = time.monotonic()
    urgent = jobs.submit(name="ondemand", node=node.name, gpu_type="h100", gpu_count=1, command="sleep 30")
    jobs.wait_state(urgent, "RUNNING")
    running_s = time.monotonic() - t0
    jobs.wait_text(jobs.output("spot", spot), "suanli: notice received", job_id=spot)
    told = wait_until(lambda: log.read_text().splitlines()[1:], 10, "the spot workload to log a signal")
    assert told[0].split()[0] in ("USR1", "TERM"), told
    requeued = wait_until(lambda: (j := slurm.job(spot)) and j.restarts == 1 and j, 20, "spot job requeued")
    assert requeued.state in ("PENDING", "REQUEUED", "COMPLETING")
    print(f"QOS preemption: on-demand running after {running_s:.2f}s; spot workload heard {told[0].split()[0]} first")


# Checkpoints on the notice, keeps working until TERM, resumes from its checkpoint.
CHECKPOINTING_WORKLOAD = (
    'ckpt="$SUANLI_CHECKPOINT_DIR/step"; step=$(cat "$ckpt" 2>/dev/null || echo 0); '
    'echo "start restart=$SUANLI_RESTART_COUNT from=$step" >> $LOG; '
    'trap \'echo "$step" > "$ckpt"; echo "USR1 checkpoint=$step" >> $LOG\' USR1; '
    "trap 'echo TERM >> $LOG; exit 0' TERM; "
    "while true; do step=$((step + 1)); sleep 0.1; done"
)


def test_spot_reclaim_notice_checkpoint_requeue_and_resume(slurm: SlurmClient, jobs: Jobs) -> None:
    """Reclaim as the backend drives it: notice (USR1), checkpoint, requeue at the deadline,
    the on-demand job takes the GPUs, the spot job resumes from its checkpoint afterwards."""
    node = nodes_with_gpu(slurm, "h100")[-1]
    ckpt_dir = jobs.out_dir / "ckpt"
    ckpt_dir.mkdir()
    log = jobs.out_dir / "reclaim.log"
    spot = jobs.submit(
        name="reclaim",
        node=node.name,
        gpu_type="h100",
        gpu_count=node.gpu_count,
        qos="spot",
        requeue=True,
        notice_s=2,
        command=CHECKPOINTING_WORKLOAD,
        env={"LOG": str(log), "SUANLI_CHECKPOINT_DIR": str(ckpt_dir)},
    )
    jobs.wait_state(spot, "RUNNING")
    jobs.wait_text(log, "start restart=0 from=0")
    time.sleep(0.5)  # let it make some progress worth keeping
    notice_at = time.monotonic()
    slurm.signal(spot, "USR1", batch_only=True)
    checkpoint = int(jobs.wait_text(log, "USR1 checkpoint=").split("USR1 checkpoint=")[1].split()[0])
    assert checkpoint > 0 and (ckpt_dir / "step").read_text().strip() == str(checkpoint)
    slurm.requeue(spot)  # the deadline: TERM, back to the queue under the same id
    kill_at = time.monotonic()
    urgent = jobs.submit(name="ondemand", node=node.name, gpu_type="h100", gpu_count=2, command="sleep 2")
    jobs.wait_state(urgent, "RUNNING")
    lines = jobs.wait_text(log, "start restart=1", timeout_s=30).splitlines()
    assert lines[:2] == ["start restart=0 from=0", f"USR1 checkpoint={checkpoint}"]
    assert set(lines[2:-1]) == {"TERM"}  # once from slurmstepd, maybe once more from the wrapper
    assert lines[-1] == f"start restart=1 from={checkpoint}"
    print(f"reclaim: notice {kill_at - notice_at:.2f}s before the kill; resumed from step {checkpoint}")


def test_requeue_restarts_the_job_under_the_same_id(slurm: SlurmClient, jobs: Jobs) -> None:
    node = nodes_with_gpu(slurm, "a100")[0].name
    log = jobs.out_dir / "requeue.log"
    job_id = jobs.submit(name="requeue", node=node, gpu_count=1, requeue=True, command=SPOT_WORKLOAD, env={"LOG": str(log)})
    jobs.wait_state(job_id, "RUNNING")
    jobs.wait_text(log, "start restart=0")
    t0 = time.monotonic()
    slurm.requeue(job_id)
    wait_until(lambda: (j := slurm.job(job_id)) and j.state == "PENDING" and j.restarts == 1, 20, "requeued")
    # back on the same node after cred_expire + 1 s: earlier, slurmd refuses the revoked credential
    jobs.wait_text(log, "start restart=1")
    print(f"requeue: running again after {time.monotonic() - t0:.2f}s")
    assert jobs.wait_state(job_id, "RUNNING").restarts == 1


def test_node_down_requeues_its_job_which_resumes_on_another_node(slurm: SlurmClient, jobs: Jobs) -> None:
    first, second = (n.name for n in nodes_with_gpu(slurm, "a100")[:2])
    log = jobs.out_dir / "failover.log"
    job_id = jobs.submit(
        name="failover", node=first, gpu_type="a100", gpu_count=1, requeue=True, command=SPOT_WORKLOAD, env={"LOG": str(log)}
    )
    jobs.wait_state(job_id, "RUNNING")
    jobs.wait_text(log, f"node={first}")
    try:
        t0 = time.monotonic()
        slurm.set_node_state(first, "down", reason="suanli test: node failure")
        assert slurm.node(first).health == NodeHealth.DOWN
        wait_until(lambda: (j := slurm.job(job_id)) and j.state == "PENDING" and j.restarts >= 1, 20, "requeue")
        slurm.update_pending(job_id, node=second, start_now=True)
        jobs.wait_text(log, f"restart=1 node={second}")
        print(f"failover: node down -> running on {second} in {time.monotonic() - t0:.2f}s")
        assert jobs.wait_state(job_id, "RUNNING").node == second
    finally:
        slurm.set_node_state(first, "resume")
    wait_until(lambda: slurm.node(first).health == NodeHealth.UP, 30, f"{first} back up")


def test_cancel_ends_the_job_and_is_idempotent(slurm: SlurmClient, jobs: Jobs) -> None:
    node = nodes_with_gpu(slurm, "h100")[-1].name
    job_id = jobs.submit(name="cancel", node=node, command="sleep 60")
    jobs.wait_state(job_id, "RUNNING")
    slurm.cancel(job_id)
    jobs.wait_state(job_id, "CANCELLED")
    slurm.cancel(job_id)  # a finished job: no error


def test_accounting_records_the_gpu_job(slurm: SlurmClient, jobs: Jobs) -> None:
    node = nodes_with_gpu(slurm, "a100")[0].name
    job_id = jobs.submit(name="acct", node=node, gpu_count=1, command="exit 3")
    done = jobs.wait_state(job_id, "FAILED")
    assert done.exit.code == 3
    record = wait_until(lambda: next((r for r in slurm.accounting([job_id]) if r.is_final), None), 20, "sacct")
    assert (record.job_id, record.state, record.nodes) == (job_id, "FAILED", (node,))


def test_slurm_errors_name_the_command_and_its_message(slurm: SlurmClient, jobs: Jobs) -> None:
    with pytest.raises(SlurmError) as err:
        jobs.submit(name="nowhere", node="no-such-node", command="true")
    assert err.value.cmd[0].endswith("sbatch") and err.value.returncode == 1
    assert "node" in err.value.stderr.lower()
    with pytest.raises(SlurmError, match="Invalid job id"):
        slurm.requeue(999_999)


def test_a_restarted_client_finds_its_jobs_again_by_tag(slurm: SlurmClient, jobs: Jobs) -> None:
    """Groundwork for re-adoption after a server restart: the tag given at submission
    (``--comment``) leads a fresh client back to the same job id, so nothing is resubmitted."""
    node = nodes_with_gpu(slurm, "a100")[-1].name
    tag = f"suanli:alloc=test-{time.time_ns()}"
    job_id = jobs.submit(name="adopt", node=node, gpu_count=1, command="sleep 30", comment=tag)
    jobs.wait_state(job_id, "RUNNING")
    fresh = SlurmClient(slurm_conf=slurm.slurm_conf)
    found = fresh.jobs_by_comment(tag)
    assert [(j.job_id, j.state, j.node) for j in found] == [(job_id, "RUNNING", node)]
    assert fresh.jobs_by_comment(tag + "-other") == []
