"""The environment a workload sees: GPU visibility, torchrun-style distributed
variables and ``SUANLI_*`` facts, so a training script needs no boilerplate.

The ``run`` command executes once per node as that node's local rank 0, with
``NPROC_PER_NODE`` GPUs; a script that starts more processes per node (e.g.
``torchrun --nproc_per_node=$NPROC_PER_NODE --nnodes=$WORLD_NODES ...``) derives
their ranks from ``NODE_RANK``. Platform variables override the task's ``envs``.
"""

from __future__ import annotations

import socket

from suanli.db.models import Allocation, Node


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node_address(node: Node) -> str:
    return str((node.labels or {}).get("address", "127.0.0.1"))


def gpu_env(alloc: Allocation, node: Node, virtual: bool) -> dict[str, str]:
    indices = ",".join(str(i) for i in alloc.gpu_indices)
    env = {
        "CUDA_VISIBLE_DEVICES": indices,
        "SUANLI_GPU_MODEL": node.gpu_model,
        "SUANLI_GPU_INDICES": indices,
        "SUANLI_GPU_MILLI": str(alloc.milli_per_gpu),
        "SUANLI_NUM_GPUS": str(len(alloc.gpu_indices)),
        "SUANLI_VIRTUAL_GPUS": "1" if virtual else "0",
        "SUANLI_NODE_NAME": node.name,
        "SUANLI_NODE_RANK": str(alloc.node_rank),
    }
    if node.gpu_model.lower().startswith("ascend"):
        env["ASCEND_RT_VISIBLE_DEVICES"] = indices
    return env


def distributed_env(alloc: Allocation, allocs: list[Allocation], nodes: dict[int, Node], master_port: int) -> dict[str, str]:
    nproc = max(1, len(alloc.gpu_indices))
    num_nodes = len(allocs)
    master = nodes[allocs[0].node_id]
    return {
        "MASTER_ADDR": node_address(master),
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(num_nodes * nproc),
        "NPROC_PER_NODE": str(nproc),
        "NODE_RANK": str(alloc.node_rank),
        "RANK": str(alloc.node_rank * nproc),
        "LOCAL_RANK": "0",
        "SUANLI_NUM_NODES": str(num_nodes),
        "SUANLI_NODE_IPS": "\n".join(node_address(nodes[a.node_id]) for a in allocs),
    }
