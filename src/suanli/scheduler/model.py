"""The resource model the scheduler reasons about: nodes, requests, allocations.

These are plain immutable values. The live platform builds them from database rows
and the simulator from trace rows; the scheduler never sees either source.

Units: every GPU has ``MILLI_PER_GPU`` (1000) milli-GPU; CPU is in millicores and
memory in MiB, as in Kubernetes and the Alibaba traces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

MILLI_PER_GPU = 1000


class PriorityClass(str, Enum):
    """Who may be preempted: ``spot`` only, after a notice; the others never."""

    RESERVED = "reserved"
    ON_DEMAND = "on-demand"
    SPOT = "spot"

    @property
    def rank(self) -> int:
        """Higher rank is served first and may preempt lower ranks (spot only)."""
        return _RANKS[self.value]


_RANKS = {"reserved": 2, "on-demand": 1, "spot": 0}


@dataclass(frozen=True)
class Node:
    """One machine with ``gpu_count`` identical GPUs.

    ``nvlink_islands`` groups GPU indices that share an NVLink domain (empty: one
    island holding every GPU); ``ib_leaf`` names the InfiniBand leaf switch.
    """

    name: str
    gpu_model: str
    gpu_count: int
    cpu_milli: int
    memory_mib: int
    nvlink_islands: tuple[tuple[int, ...], ...] = ()
    ib_leaf: str = ""
    zone: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("node name must not be empty")
        if self.gpu_count < 0 or self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError(f"node {self.name}: gpu_count, cpu_milli and memory_mib must be >= 0")


@dataclass(frozen=True)
class Request:
    """What one workload asks for on a single node.

    Either ``gpu_milli`` in 1..999 of one GPU (sharing), or ``gpu_count`` whole
    GPUs, or neither (CPU only). ``gpu_models`` restricts the GPU model (empty:
    any). ``nodes`` > 1 makes a gang of identical per-node requests (placed by the
    gang planner, not by a single cycle).

    ``pin_nodes`` names the nodes it must run on (empty: any); the scheduler only
    filters by it, who may set it is the control plane's decision (operators' node
    verification, ``control.verify_jobs``). ``ignore_cordon`` lets a pinned request
    land on a cordoned node (re-verifying a node cordoned for failing its check);
    it needs ``pin_nodes``, so it never spreads to nodes it did not name.
    """

    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_count: int = 0
    gpu_milli: int = 0
    gpu_models: frozenset[str] = field(default_factory=frozenset)
    priority: PriorityClass = PriorityClass.ON_DEMAND
    nodes: int = 1
    name: str = ""
    pin_nodes: frozenset[str] = field(default_factory=frozenset)
    ignore_cordon: bool = False

    def __post_init__(self) -> None:
        if self.ignore_cordon and not self.pin_nodes:
            raise ValueError("ignore_cordon needs pin_nodes: only a request pinned to named nodes may land on a cordoned one")
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError("cpu_milli and memory_mib must be >= 0")
        if self.gpu_count < 0:
            raise ValueError("gpu_count must be >= 0")
        if self.gpu_milli and self.gpu_count:
            raise ValueError("ask for gpu_count whole GPUs or gpu_milli of one GPU, not both")
        if not 0 <= self.gpu_milli < MILLI_PER_GPU:
            raise ValueError(f"gpu_milli must be in 0..{MILLI_PER_GPU - 1}; use gpu_count for whole GPUs")
        if self.nodes < 1:
            raise ValueError("nodes must be >= 1")

    @property
    def milli_per_gpu(self) -> int:
        """Milli taken on each GPU used: the share, 1000 for whole GPUs, 0 for CPU only."""
        return self.gpu_milli if self.gpu_milli else (MILLI_PER_GPU if self.gpu_count else 0)

    @property
    def gpus_used(self) -> int:
        """Number of GPUs touched on the node."""
        return 1 if self.gpu_milli else self.gpu_count

    @property
    def total_gpu_milli(self) -> int:
        return self.milli_per_gpu * self.gpus_used

    @property
    def is_sharing(self) -> bool:
        return self.gpu_milli > 0


@dataclass(frozen=True)
class Allocation:
    """A request bound to concrete slots: one node, some GPU indices, milli on each."""

    node: str
    gpu_indices: tuple[int, ...]
    milli_per_gpu: int
    cpu_milli: int
    memory_mib: int

    @property
    def total_gpu_milli(self) -> int:
        return self.milli_per_gpu * len(self.gpu_indices)
