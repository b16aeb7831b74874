"""The environment a workload sees: GPU visibility, per-node distributed variables and
``SUANLI_*`` facts, so a training script needs no boilerplate.

The launch convention: the platform starts ``run`` once per node, and that one process
starts the node's workers, e.g.::

    torchrun --nnodes=$NNODES --nproc-per-node=$NPROC_PER_NODE --node-rank=$NODE_RANK \\
             --master-addr=$MASTER_ADDR --master-port=$MASTER_PORT train.py

So the platform injects only what is true of the node: ``NNODES``, ``NODE_RANK``,
``NPROC_PER_NODE``, ``MASTER_ADDR`` and ``MASTER_PORT``. It never sets the per-process
``RANK``, ``LOCAL_RANK`` or ``WORLD_SIZE``: the process it starts is not one of the
workers, and torchrun gives each worker its own. ``NPROC_PER_NODE`` is the node's whole
GPUs; on a node with none (CPU only, or a fraction of one GPU) it is 1 unless the task's
``envs`` set it (a CPU job may run several workers per node, e.g. gloo on CPU). Every
other platform variable overrides the task's ``envs``. ``MASTER_ADDR`` is node 0's
address; the local container runtime makes it node 0's container hostname, which the
other nodes' containers resolve (``backends/local/container_runtime``).

With ``distributed: torch`` the platform writes that torchrun line itself
(``torch_launch``): ``run`` is then one worker's command, run by ``sh`` in each worker.
"""

from __future__ import annotations

import shlex
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


#: The per-node variables of the launch convention (see the module docstring).
DISTRIBUTED_VARS = ("NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT")


def nproc_per_node(alloc: Allocation, task_envs: dict[str, str]) -> int:
    """Workers per node: the node's whole GPUs; without any (CPU only, a fraction of a GPU),
    the task's own ``NPROC_PER_NODE`` when it is a positive number, else 1."""
    whole = len(alloc.gpu_indices) if alloc.milli_per_gpu >= 1000 else 0
    if whole:
        return whole
    asked = task_envs.get("NPROC_PER_NODE", "").strip()
    return int(asked) if asked.isdigit() and int(asked) > 0 else 1


def distributed_env(
    alloc: Allocation, allocs: list[Allocation], nodes: dict[int, Node], master_port: int, task_envs: dict[str, str]
) -> dict[str, str]:
    """What one node of a job is told: the per-node launch variables (never a worker's
    ``RANK``/``WORLD_SIZE``) and ``SUANLI_NUM_NODES``/``SUANLI_NODE_IPS``."""
    num_nodes = len(allocs)
    master = nodes[min(allocs, key=lambda a: a.node_rank).node_id]
    return {
        "NNODES": str(num_nodes),
        "NODE_RANK": str(alloc.node_rank),
        "NPROC_PER_NODE": str(nproc_per_node(alloc, task_envs)),
        "MASTER_ADDR": node_address(master),
        "MASTER_PORT": str(master_port),
        "SUANLI_NUM_NODES": str(num_nodes),
        "SUANLI_NODE_IPS": "\n".join(node_address(nodes[a.node_id]) for a in sorted(allocs, key=lambda a: a.node_rank)),
    }


def torch_launch(run: str) -> str:
    """``distributed: torch``: each node runs torchrun from the per-node variables, and
    torchrun runs ``run`` (a shell command) once per worker, with the worker's ``RANK``,
    ``LOCAL_RANK`` and ``WORLD_SIZE``. torchrun's agent ignores USR1, of which it would die:
    a spot notice reaches the workers through ``$SUANLI_PREEMPT_DEADLINE_FILE`` (they run
    in sessions of their own, out of reach of the signal)."""
    return (
        "trap '' USR1\n"
        'exec torchrun --nnodes="$NNODES" --nproc-per-node="$NPROC_PER_NODE" --node-rank="$NODE_RANK" '
        '--master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT" --no-python sh -c ' + shlex.quote(run) + "\n"
    )
