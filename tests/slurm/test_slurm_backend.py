"""``SlurmBackend`` on the real daemons: the control plane's Backend protocol on Slurm.

Each test gets a backend with its own job tag prefix, so ``list_running`` sees only its
own jobs even when other runs share the cluster; every job it left is cancelled.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from suanli.backends.base import AlreadyRunning, Backend, BackendError, Handle, TaskSpec, TaskState
from suanli.backends.slurm import SlurmBackend, SlurmClient
from tests.slurm.slurm_helpers import nodes_with_gpu, wait_until

pytestmark = pytest.mark.slurm


@pytest.fixture
def backend(slurm: SlurmClient, tmp_path: Path) -> Iterator[SlurmBackend]:
    tmp_path.chmod(0o777)
    b = SlurmBackend(slurm, tmp_path / "slurm", tag_prefix=f"t{time.time_ns()}", notice_s=5)
    yield b
    for h in b.list_running():
        b.stop(h, grace_s=0)
    wait_until(lambda: not b.list_running(), 30, "backend test jobs to end")


def spec(key: str, node: str, gpus: tuple[int, ...] = (), milli: int = 1000, run: str = "sleep 30") -> TaskSpec:
    return TaskSpec(
        key=key,
        kind="job",
        workload_id=1,
        node=node,
        node_rank=0,
        run=run,
        env={"CUDA_VISIBLE_DEVICES": "99", "SUANLI_JOB_ID": "1"},
        gpu_indices=gpus,
        milli_per_gpu=milli if gpus else 0,
        cpu_milli=1000,
        memory_mib=1024,
    )


def running_placement(backend: SlurmBackend, h: Handle) -> tuple[str, tuple[int, ...]]:
    return wait_until(lambda: backend.placement(h), 20, f"{h.key} running")


def test_inventory_maps_sinfo_to_typed_nodes(backend: SlurmBackend) -> None:
    assert isinstance(backend, Backend)
    inv = backend.discover_inventory()
    by_model: dict[str, int] = {}
    for n in inv.nodes:
        assert n.backend == "slurm" and n.labels["slurm_node"] == n.name
        assert n.gpu_count >= 2 and int(n.labels["shards_per_gpu"]) >= 2 and n.cpu_cores > 0
        by_model[n.gpu_model] = by_model.get(n.gpu_model, 0) + 1
    assert {"H100", "A100"} <= set(by_model)
    assert all(n.gpu_memory_gib == 80 for n in inv.nodes if n.gpu_model == "H100")


def test_typed_placement_job_sees_the_gpus_slurm_reports(slurm: SlurmClient, backend: SlurmBackend) -> None:
    node = nodes_with_gpu(slurm, "a100")[-1].name
    h = backend.submit(spec("job-1-0", node, (2, 3), run='echo "cvd=$CUDA_VISIBLE_DEVICES idx=$SUANLI_GPU_INDICES"; sleep 30'))
    where, indices = running_placement(backend, h)
    assert where == node and len(indices) == 2
    cvd = ",".join(map(str, indices))
    text = wait_until(lambda: "cvd=" in (t := backend.logs(h)) and t, 20, "job output")
    assert f"cvd={cvd} idx={cvd}" in text  # Slurm's choice, never the 99 the caller passed
    assert backend.status(h).state == TaskState.RUNNING
    with pytest.raises(AlreadyRunning):
        backend.submit(spec("job-1-0", node, (2, 3)))


def test_two_fractional_jobs_share_one_gpu(slurm: SlurmClient, backend: SlurmBackend) -> None:
    node = nodes_with_gpu(slurm, "h100")[-1]
    hs = [
        backend.submit(spec(f"job-{i}-0", node.name, (0,), milli=500, run='echo "cvd=$CUDA_VISIBLE_DEVICES"; sleep 30'))
        for i in (1, 2)
    ]
    places = [running_placement(backend, h) for h in hs]  # both at once
    assert places[0] == places[1] and len(places[0][1]) == 1, places
    for h in hs:
        assert f"cvd={places[0][1][0]}" in wait_until(lambda h=h: "cvd=" in (t := backend.logs(h)) and t, 20, "output")
    assert slurm.node(node.name).shards_used == node.shards_per_gpu  # two halves of one GPU


def test_a_restarted_server_readopts_by_job_id_and_submits_nothing_twice(slurm: SlurmClient, backend: SlurmBackend) -> None:
    node = nodes_with_gpu(slurm, "a100")[0].name
    h = backend.submit(spec("job-7-0", node, (0,), run="echo started; sleep 30"))
    running_placement(backend, h)
    # Slurm reports RUNNING once the node is allocated, a moment before the script runs.
    wait_until(lambda: "started" in backend.logs(h), 20, "job output")
    stored = h.to_json()  # what the database keeps
    fresh = SlurmBackend(SlurmClient(slurm_conf=slurm.slurm_conf), backend.root, tag_prefix=backend.tag_prefix)
    found = fresh.list_running()
    assert [(x.key, x.data["job_id"]) for x in found] == [("job-7-0", h.data["job_id"])]
    assert fresh.status(Handle.from_json(stored)).state == TaskState.RUNNING
    with pytest.raises(AlreadyRunning):
        fresh.submit(spec("job-7-0", node, (0,)))
    assert len([j for j in slurm.jobs() if j.comment == h.data["tag"]]) == 1
    fresh.stop(Handle.from_json(stored), grace_s=2)
    st = wait_until(lambda: (s := fresh.status(h)).state == TaskState.EXITED and s, 20, "stopped")
    assert st.exit_code is not None and fresh.list_running() == []
    fresh.stop(h)  # idempotent
    assert backend.logs(h).count("started") == 1


def test_bad_requests_are_refused_with_a_clear_error(backend: SlurmBackend) -> None:
    with pytest.raises(BackendError, match="no Slurm node 'nowhere'"):
        backend.submit(spec("job-9-0", "nowhere", (0,)))
    with pytest.raises(BackendError, match="bad task key"):
        backend.submit(spec("../x", backend.discover_inventory().nodes[0].name))
    assert backend.status(Handle("slurm", "job-9-0", {"job_id": 999_999})).state == TaskState.LOST


def test_cli_prints_the_cluster_as_an_inventory_suanli_accepts(slurm: SlurmClient) -> None:
    import yaml
    from typer.testing import CliRunner

    from suanli.cli import slurm as slurm_cli
    from suanli.inventory import Inventory

    out = CliRunner().invoke(slurm_cli.app, ["inventory", "--slurm-conf", str(slurm.slurm_conf)])
    assert out.exit_code == 0, out.output
    inv = Inventory.model_validate(yaml.safe_load(out.output))
    assert {n.name for n in inv.nodes} == {n.name for n in slurm.nodes()}
    assert all(n.backend == "slurm" for n in inv.nodes)


def test_requeue_moves_the_job_to_another_node_under_the_same_id(slurm: SlurmClient, backend: SlurmBackend) -> None:
    first, second = (n.name for n in nodes_with_gpu(slurm, "a100")[:2])
    h = backend.submit(spec("job-3-0", first, (0,), run='echo "on=$SLURMD_NODENAME restart=$SUANLI_RESTART_COUNT"; sleep 30'))
    assert running_placement(backend, h)[0] == first
    backend.requeue(h, node=second)
    assert wait_until(lambda: (p := backend.placement(h)) and p[0] == second and p, 30, "running on the other node")
    assert "restart=1" in wait_until(lambda: "restart=1" in (t := backend.logs(h)) and t, 20, "second run's output")
    assert backend.job(h, fresh=True).restarts == 1


def test_exec_runs_inside_the_job_with_its_environment_gpus_and_notice(slurm: SlurmClient, backend: SlurmBackend) -> None:
    node = nodes_with_gpu(slurm, "a100")[-1].name
    # The wrapper ends the job notice_s after the notice; the fixture's 5 s ran out before the
    # last exec when each srun took seconds on a loaded machine ("instance-7 is not running").
    backend.notice_s = 120
    h = backend.submit(spec("instance-7", node, (0, 1), run='trap "" USR1; : >trapped; sleep 300'))
    _, indices = running_placement(backend, h)
    # "running" is the job's state, not the workload's: a notice before its trap ran killed it
    # (exit 128 + USR1, once in a five-run check); the product sends instances no signal at all
    trapped = backend.task_dir("instance-7") / "work" / "trapped"
    wait_until(trapped.exists, 20, "the workload's USR1 trap")
    done = backend.exec(h, 'echo "cvd=$CUDA_VISIBLE_DEVICES job=$SUANLI_JOB_ID node=$SLURMD_NODENAME pwd=$PWD"; exit 3')
    assert done.exit_code == 3
    assert f"cvd={','.join(map(str, indices))} job=1 node={node} pwd={backend.task_dir('instance-7')}/work" in done.output
    assert "$ echo" in backend.logs(h)  # recorded with the task's output, as on the local backend
    deadline = int(time.time()) + backend.notice_s
    backend.notice(h, deadline)  # the wrapper then records its own, from the same notice length
    assert abs(int(backend.exec(h, "echo $SUANLI_PREEMPT_DEADLINE").output.strip()) - deadline) <= 2
    slow = backend.exec(h, "sleep 5", timeout_s=1)
    assert slow.exit_code == 124 and "timed out" in slow.output
    backend.stop(h, grace_s=0)
    wait_until(lambda: backend.status(h).state != TaskState.RUNNING, 30, "instance stopped")
    with pytest.raises(BackendError, match="not running"):
        backend.exec(h, "true")
