"""Slurm backend groundwork: a typed client for a real Slurm 22.05 cluster.

- ``client.SlurmClient``: runs sinfo/squeue/sacct/sbatch/scancel/scontrol, raises ``SlurmError``.
- ``sbatch.SbatchSpec``: an allocation pinned to a node and its GPUs (or shards), as sbatch.
- ``parse``: pure parsers of Slurm's ``--json`` output and GRES strings.
- ``model``: the dataclasses they produce (``SlurmNode``, ``SlurmJob``, ``Gres``).
- ``backend.SlurmBackend``: the control plane's Backend protocol on top of them.
- ``reports``: its node health and GPU placements as the control plane's report dataclasses.

The test cluster is ``scripts/slurm-cluster`` (see ``docs/slurm.md``).
"""

from suanli.backends.slurm.backend import SlurmBackend
from suanli.backends.slurm.client import SlurmClient, SlurmError
from suanli.backends.slurm.model import ExitStatus, Gres, NodeHealth, SlurmJob, SlurmNode
from suanli.backends.slurm.parse import SlurmParseError
from suanli.backends.slurm.sbatch import SbatchSpec, SbatchSpecError, shards_for_milli

__all__ = [
    "ExitStatus",
    "Gres",
    "NodeHealth",
    "SbatchSpec",
    "SbatchSpecError",
    "SlurmBackend",
    "SlurmClient",
    "SlurmError",
    "SlurmJob",
    "SlurmNode",
    "SlurmParseError",
    "shards_for_milli",
]
