"""Cluster state as NumPy arrays: what is free on every node and GPU, right now.

Policies score all nodes at once with vectorised arithmetic over these arrays, so
one scheduling cycle costs a few array passes instead of a Python loop per node.
``bind`` and ``unbind`` touch one node's row, O(GPUs of one node); ``bind_all`` takes
a snapshot's allocations in array passes.

GPU slots are padded to the widest node with ``0`` free milli: a padded slot never
fits a request (every GPU request asks for at least 1 milli) and adds nothing to
idle sums, so no mask is needed in the hot path.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

import numpy as np

from suanli.scheduler.model import MILLI_PER_GPU, Allocation, Node

#: One counter for every version bump of every state and copy: a version is never
#: reused, so a score cached for (node, version) can't be mistaken for another
#: state's, even after a what-if on a copy that diverged.
_versions = itertools.count(1)


class OverAllocation(ValueError):
    """A bind that would take more than is free (a scheduler bug or a stale plan)."""


class ClusterState:
    def __init__(self, nodes: Sequence[Node]) -> None:
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        self.nodes: list[Node] = list(nodes)
        self.index: dict[str, int] = {name: i for i, name in enumerate(names)}
        self.models: list[str] = sorted({n.gpu_model for n in nodes})
        model_ids = {m: i for i, m in enumerate(self.models)}
        n = len(nodes)
        width = max((node.gpu_count for node in nodes), default=0)
        self.gpu_count = np.array([node.gpu_count for node in nodes], dtype=np.int32)
        self.model_id = np.array([model_ids[node.gpu_model] for node in nodes], dtype=np.int32)
        self.cpu_total = np.array([node.cpu_milli for node in nodes], dtype=np.int64)
        self.mem_total = np.array([node.memory_mib for node in nodes], dtype=np.int64)
        self.gpu_total = np.zeros((n, width), dtype=np.int32)
        for i, node in enumerate(nodes):
            self.gpu_total[i, : node.gpu_count] = MILLI_PER_GPU
        self.cpu_free = self.cpu_total.copy()
        self.mem_free = self.mem_total.copy()
        self.gpu_free = self.gpu_total.copy()
        #: False for cordoned or down nodes: they keep their allocations but get no new work.
        self.schedulable = np.ones(n, dtype=bool)
        #: True for nodes that are unschedulable only because they are cordoned: a request
        #: pinned to them with ``ignore_cordon`` (a node's re-verification) may still land.
        self.cordoned = np.zeros(n, dtype=bool)
        #: Bumped on every change of a node, so policies can cache per-node scores.
        self.version = np.zeros(n, dtype=np.int64)
        #: GPU workloads per node by class ("share", "1-gpu", "8-gpu", ...): the
        #: "affinity" GpuClustering packs by.
        self.classes: dict[str, np.ndarray] = {}

    # -- sizes -------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def total_gpu_milli(self) -> int:
        return int(self.gpu_total.sum())

    @property
    def used_gpu_milli(self) -> int:
        return int(self.gpu_total.sum() - self.gpu_free.sum())

    def model_mask(self, models: Iterable[str]) -> np.ndarray:
        """Nodes whose GPU model is one of ``models`` (case-insensitive); empty means all."""
        wanted = {m.lower() for m in models}
        if not wanted:
            return np.ones(self.num_nodes, dtype=bool)
        ids = [i for i, m in enumerate(self.models) if m.lower() in wanted]
        return np.isin(self.model_id, ids)

    # -- mutation ----------------------------------------------------------------------
    def bind(self, alloc: Allocation) -> None:
        """Take an allocation's resources; raises ``OverAllocation`` and changes nothing
        if any of them is not free."""
        i = self.index[alloc.node]
        gpus = list(alloc.gpu_indices)
        if len(set(gpus)) != len(gpus) or any(not 0 <= g < self.gpu_count[i] for g in gpus):
            raise OverAllocation(f"{alloc.node}: bad GPU indices {gpus}")
        if alloc.cpu_milli > self.cpu_free[i] or alloc.memory_mib > self.mem_free[i]:
            raise OverAllocation(f"{alloc.node}: not enough CPU or memory free")
        if gpus and (self.gpu_free[i, gpus] < alloc.milli_per_gpu).any():
            raise OverAllocation(f"{alloc.node}: GPUs {gpus} lack {alloc.milli_per_gpu} free milli")
        self.cpu_free[i] -= alloc.cpu_milli
        self.mem_free[i] -= alloc.memory_mib
        if gpus:
            self.gpu_free[i, gpus] -= alloc.milli_per_gpu
            self.class_counts(workload_class(alloc))[i] += 1
        self.version[i] = next(_versions)

    def bind_all(self, allocs: Sequence[Allocation]) -> None:
        """``bind`` for many allocations at once, as a snapshot of a large cluster does
        (thousands of allocations; one ``bind`` each was most of the snapshot's time):
        the same checks on the totals, in array passes. Every change only takes, so the
        totals fit if and only if each ``bind`` in turn would. Raises ``OverAllocation``
        and changes nothing if one does not fit."""
        if not allocs:
            return
        n = len(allocs)
        nodes = np.fromiter((self.index[a.node] for a in allocs), np.int64, n)
        slots: list[int] = []  # flat (node, GPU) slots taken, with their milli
        milli: list[int] = []
        width = self.gpu_free.shape[1]
        for i, a in zip(nodes.tolist(), allocs, strict=True):
            gpus = a.gpu_indices
            if len(set(gpus)) != len(gpus) or any(not 0 <= g < self.gpu_count[i] for g in gpus):
                raise OverAllocation(f"{a.node}: bad GPU indices {list(gpus)}")
            slots.extend(i * width + g for g in gpus)
            milli.extend([a.milli_per_gpu] * len(gpus))
        cpu_free, mem_free, gpu_free = self.cpu_free.copy(), self.mem_free.copy(), self.gpu_free.copy()
        np.subtract.at(cpu_free, nodes, np.fromiter((a.cpu_milli for a in allocs), np.int64, n))
        np.subtract.at(mem_free, nodes, np.fromiter((a.memory_mib for a in allocs), np.int64, n))
        np.subtract.at(gpu_free.reshape(-1), np.array(slots, np.int64), np.array(milli, gpu_free.dtype))
        short = np.flatnonzero((cpu_free < 0) | (mem_free < 0))
        if short.size:
            raise OverAllocation(f"{self.nodes[short[0]].name}: not enough CPU or memory free")
        short = np.flatnonzero((gpu_free < 0).any(axis=1))
        if short.size:
            raise OverAllocation(f"{self.nodes[short[0]].name}: GPUs lack the milli their allocations take")
        self.cpu_free[:], self.mem_free[:], self.gpu_free[:] = cpu_free, mem_free, gpu_free
        for i, a in zip(nodes.tolist(), allocs, strict=True):
            if a.gpu_indices:
                self.class_counts(workload_class(a))[i] += 1
        for i in np.unique(nodes).tolist():
            self.version[i] = next(_versions)

    def unbind(self, alloc: Allocation) -> None:
        """Give an allocation's resources back; raises and changes nothing if that would
        free more than the node has (a double unbind)."""
        i = self.index[alloc.node]
        gpus = list(alloc.gpu_indices)
        if (
            self.cpu_free[i] + alloc.cpu_milli > self.cpu_total[i]
            or self.mem_free[i] + alloc.memory_mib > self.mem_total[i]
            or (gpus and (self.gpu_free[i, gpus] + alloc.milli_per_gpu > self.gpu_total[i, gpus]).any())
        ):
            raise OverAllocation(f"{alloc.node}: unbind would free more than was allocated")
        self.cpu_free[i] += alloc.cpu_milli
        self.mem_free[i] += alloc.memory_mib
        if gpus:
            self.gpu_free[i, gpus] += alloc.milli_per_gpu
            self.class_counts(workload_class(alloc))[i] -= 1
        self.version[i] = next(_versions)

    def class_counts(self, cls: str) -> np.ndarray:
        """GPU workloads of class ``cls`` on each node (created on first use)."""
        if cls not in self.classes:
            self.classes[cls] = np.zeros(self.num_nodes, dtype=np.int32)
        return self.classes[cls]

    def node_mask(self, names: Iterable[str]) -> np.ndarray:
        """Nodes named in ``names`` (names not registered match nothing)."""
        mask = np.zeros(self.num_nodes, dtype=bool)
        mask[[self.index[n] for n in names if n in self.index]] = True
        return mask

    def set_schedulable(self, node: str, schedulable: bool, cordoned: bool = False) -> None:
        """``cordoned``: unschedulable because of a cordon only (not down, not a backend
        this server lacks), so requests with ``ignore_cordon`` pinned to it may land."""
        i = self.index[node]
        self.schedulable[i] = schedulable
        self.cordoned[i] = cordoned and not schedulable
        self.version[i] = next(_versions)

    def copy(self) -> ClusterState:
        """An independent copy for what-if planning (the node list is shared, immutable)."""
        other = object.__new__(ClusterState)
        other.__dict__.update(self.__dict__)
        for name in ("cpu_free", "mem_free", "gpu_free", "schedulable", "cordoned", "version"):
            setattr(other, name, getattr(self, name).copy())
        other.classes = {k: v.copy() for k, v in self.classes.items()}
        return other


def workload_class(alloc_or_milli: Allocation | int, gpus: int = 1) -> str:
    """The GPU class of a workload: "share" for a fraction of one GPU, else "<k>-gpu"."""
    if isinstance(alloc_or_milli, Allocation):
        milli, gpus = alloc_or_milli.milli_per_gpu, len(alloc_or_milli.gpu_indices)
    else:
        milli = alloc_or_milli
    return "share" if milli < MILLI_PER_GPU else f"{gpus}-gpu"
