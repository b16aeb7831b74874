"""The launch convention's variables (``control.environment``): per node, never per worker."""

from __future__ import annotations

from suanli.control.environment import DISTRIBUTED_VARS, distributed_env
from suanli.db.models import Allocation, Node


def job(gpus_per_node: int, milli: int = 1000, num_nodes: int = 2) -> tuple[list[Allocation], dict[int, Node]]:
    nodes = {
        i: Node(id=i, name=f"n{i}", gpu_model="H100", gpu_count=8, labels={"address": f"10.0.0.{i}"})
        for i in range(1, num_nodes + 1)
    }
    # listed out of rank order: the master is rank 0's node, not the first row
    allocs = [
        Allocation(node_id=i, node_rank=num_nodes - i, gpu_indices=list(range(gpus_per_node)), milli_per_gpu=milli) for i in nodes
    ]
    return allocs, nodes


def test_each_node_is_told_its_rank_the_node_count_its_workers_and_rank_0_s_address() -> None:
    allocs, nodes = job(gpus_per_node=4)
    envs = {a.node_rank: distributed_env(a, allocs, nodes, 29500, {}) for a in allocs}
    for rank, env in envs.items():
        assert {k: env[k] for k in DISTRIBUTED_VARS} == {
            "NNODES": "2",
            "NODE_RANK": str(rank),
            "NPROC_PER_NODE": "4",
            "MASTER_ADDR": "10.0.0.2",  # node 2 holds rank 0
            "MASTER_PORT": "29500",
        }, env
        assert not {"RANK", "LOCAL_RANK", "WORLD_SIZE"} & set(env), env
        assert env["SUANLI_NODE_IPS"].split("\n") == ["10.0.0.2", "10.0.0.1"], env


def test_workers_per_node_follow_whole_gpus_and_a_cpu_task_may_choose_its_own() -> None:
    def nproc(gpus: int, milli: int, envs: dict[str, str]) -> str:
        allocs, nodes = job(gpus, milli)
        return distributed_env(allocs[0], allocs, nodes, 1, envs)["NPROC_PER_NODE"]

    assert nproc(2, 1000, {"NPROC_PER_NODE": "7"}) == "2"  # whole GPUs: one worker each, whatever the task says
    assert nproc(1, 500, {}) == "1"  # a fraction of a GPU
    assert nproc(0, 0, {}) == "1"  # CPU only
    assert nproc(0, 0, {"NPROC_PER_NODE": "3"}) == "3"  # e.g. gloo on CPU, several workers per node
    assert nproc(1, 250, {"NPROC_PER_NODE": "2"}) == "2"
    assert nproc(0, 0, {"NPROC_PER_NODE": "zero"}) == nproc(0, 0, {"NPROC_PER_NODE": "0"}) == "1"
