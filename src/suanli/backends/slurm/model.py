"""Typed views of what Slurm reports: nodes with their GRES, and jobs.

Slurm speaks in strings ("gpu:h100:4,shard:h100:40", "gpu:a100:2(IDX:0-1)", raw wait
statuses); the Slurm backend reasons in these dataclasses instead, so that the strings are
parsed once, in ``parse.py``, and tested there on real captured output.

Node health vocabulary (``base.NodeHealth``: what Suanli's control plane needs from Slurm's many states):

- ``up``: accepts work (Slurm idle, mixed, allocated, completing without a bad flag).
- ``draining``: runs what it has, takes nothing new (DRAIN flag, or state ``draining``).
- ``down``: its work is lost and must fail over (``down``, ``fail``, NOT_RESPONDING, ...).

Job state vocabulary is Slurm's own (PENDING, RUNNING, COMPLETING, COMPLETED, FAILED,
CANCELLED, PREEMPTED, NODE_FAIL, TIMEOUT, ...); the sets below say which are active and
which are final, because a requeued job passes through "final-looking" states (PREEMPTED,
NODE_FAIL in accounting) and comes back PENDING under the same job id.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from suanli.backends.base import NodeHealth  # the backend-neutral vocabulary, re-exported here

#: Jobs in these states hold or wait for resources; Suanli must keep tracking them.
ACTIVE_JOB_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
    }
)
#: Jobs in these states are over for good (unless someone requeues them by hand).
FINAL_JOB_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)


#: Node states and flags that make a node ``down`` (its work must fail over).
DOWN_NODE_STATES = frozenset({"down", "fail", "failing", "future", "unknown"})
DOWN_NODE_FLAGS = frozenset({"NOT_RESPONDING", "FAIL", "POWERED_DOWN", "POWERING_DOWN", "INVALID_REG"})


@dataclass(frozen=True)
class Gres:
    """One generic resource on a node, e.g. ``gpu`` of type ``h100``, count 4.

    ``used`` and ``used_indices`` come from ``gres_used``; Slurm 22.05 under-reports the
    shard count there (one job of 5 shards shows as 1), so prefer ``SlurmNode.tres_used``
    for shard arithmetic and use ``used_indices`` only to know which GPUs are touched.
    """

    name: str
    type: str | None
    count: int
    used: int = 0
    used_indices: tuple[int, ...] = ()


@dataclass(frozen=True)
class SlurmNode:
    """A Slurm node as ``sinfo --json`` reports it."""

    name: str
    state: str  # Slurm's base state, lower case: idle, mixed, allocated, down, ...
    flags: tuple[str, ...]  # DRAIN, NOT_RESPONDING, ...
    reason: str
    cpus: int
    alloc_cpus: int
    memory_mb: int
    alloc_memory_mb: int
    gres: tuple[Gres, ...]
    partitions: tuple[str, ...]
    tres_used: dict[str, int] = field(default_factory=dict)

    @property
    def health(self) -> NodeHealth:
        """Collapse Slurm's state and flags to what placement and failover need."""
        if self.state in DOWN_NODE_STATES or set(self.flags) & DOWN_NODE_FLAGS:
            return NodeHealth.DOWN
        if self.state in {"drain", "draining", "drained"} or "DRAIN" in self.flags:
            return NodeHealth.DRAINING
        return NodeHealth.UP

    @property
    def down_because(self) -> str:
        """Why ``health`` is down, in Slurm's words: the state and flags that make it so,
        then Slurm's reason, e.g. ``NOT_RESPONDING`` (a slurmd that stopped answering, state
        still ``mixed``) or ``DOWN, NOT_RESPONDING: Not responding``; "" when not down."""
        if self.health != NodeHealth.DOWN:
            return ""
        what = ([self.state.upper()] if self.state in DOWN_NODE_STATES else []) + [f for f in self.flags if f in DOWN_NODE_FLAGS]
        return ", ".join(what) + (f": {self.reason}" if self.reason else "")

    def gpus(self) -> dict[str, int]:
        """Whole GPUs per type on this node, e.g. ``{"h100": 4}``."""
        out: dict[str, int] = {}
        for g in self.gres:
            if g.name == "gpu":
                key = g.type or ""
                out[key] = out.get(key, 0) + g.count
        return out

    @property
    def gpu_count(self) -> int:
        return sum(self.gpus().values())

    @property
    def shard_count(self) -> int:
        return sum(g.count for g in self.gres if g.name == "shard")

    @property
    def shards_per_gpu(self) -> int:
        """Shards each GPU is cut into (0 when the node does not share GPUs)."""
        return self.shard_count // self.gpu_count if self.gpu_count else 0

    @property
    def shards_used(self) -> int:
        return self.tres_used.get("gres/shard", 0)


@dataclass(frozen=True)
class ExitStatus:
    """How a job's batch script ended: an exit code, or the signal that killed it."""

    code: int = 0
    signal: int = 0

    @classmethod
    def from_wait_status(cls, raw: int) -> ExitStatus:
        """Decode squeue's ``exit_code``, a raw wait(2) status (exit 3 is 768)."""
        return cls(code=(raw >> 8) & 0xFF, signal=raw & 0x7F)


@dataclass(frozen=True)
class SlurmJob:
    """A job as ``squeue --json`` (or ``sacct --json``) reports it.

    ``gpu_indices`` maps each node to the GPU indices (gres.conf order, the numbers the job
    sees in CUDA_VISIBLE_DEVICES) its GPUs or shards sit on, read from ``gres_detail``.
    """

    job_id: int
    name: str
    state: str
    reason: str
    nodes: tuple[str, ...]
    partition: str
    qos: str
    requeue: bool
    restarts: int
    exit: ExitStatus
    submit_time: int
    start_time: int
    end_time: int
    gpu_indices: dict[str, tuple[int, ...]] = field(default_factory=dict)
    tres_per_node: str = ""
    required_nodes: tuple[str, ...] = ()
    standard_output: str = ""
    comment: str = ""

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_JOB_STATES

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_JOB_STATES

    @property
    def node(self) -> str | None:
        """The (first) node the job runs on; Suanli's allocations are one node each."""
        return self.nodes[0] if self.nodes else None
