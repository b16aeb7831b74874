"""What the Slurm backend reports to the control plane, from what ``sinfo``/``squeue`` say.

Pure: ``SlurmNode`` and ``SlurmJob`` (already parsed, ``parse.py``) in, the backend-neutral
report dataclasses of ``backends.base`` out, so the control plane applies Slurm's view
(``control.health``) without knowing Slurm's vocabulary, and this is tested on captured
output without a cluster.
"""

from __future__ import annotations

from suanli.backends.base import NodeHealth, NodeReport, Placement
from suanli.backends.slurm.model import SlurmJob, SlurmNode


def node_report(node: SlurmNode) -> NodeReport:
    """A node's health; the reason of a down node names the state and flags that made it
    so (``NOT_RESPONDING`` for a slurmd that stopped answering), else Slurm's own reason."""
    reason = node.down_because if node.health == NodeHealth.DOWN else node.reason
    return NodeReport(node.name, node.health, reason)


def job_placement(key: str, job: SlurmJob | None) -> Placement | None:
    """The node and GPU indices Slurm gave a running job (its ``CUDA_VISIBLE_DEVICES``);
    None while it is not running (pending, requeued, gone)."""
    if job is None or job.state != "RUNNING" or not job.node:
        return None
    return Placement(key, job.node, tuple(job.gpu_indices.get(job.node, ())))
