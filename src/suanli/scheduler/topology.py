"""Where GPUs sit relative to each other: NVLink islands inside a node, IB leaves
between nodes.

Two facts drive placement. Inside a node, GPUs of one NVLink island talk at NVLink
speed and GPUs of different islands over PCIe (or not at all): a 4-GPU job split
over two islands runs its all-reduce at PCIe speed. Between nodes, members under
one InfiniBand leaf switch talk through one hop; spanning leaves adds spine hops
and shares their oversubscribed uplinks with everyone else. So:

* ``pick_gpus_in_island`` chooses GPUs for a multi-GPU request inside one island
  when some island has enough free GPUs (the tightest such island, so the roomy
  ones stay whole for bigger requests);
* ``Topology`` maps nodes to leaves as integer ids, so a gang planner can count
  feasible nodes per leaf with one ``np.bincount``;
* ``IslandAware`` wraps any policy: among the nodes the policy likes equally it
  prefers those where the request fits one island, and it picks GPUs inside one
  island. Policies stay leaf plugins that know nothing of topology.

Pure functions over ``ClusterState``; nothing here mutates state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from suanli.scheduler.model import MILLI_PER_GPU, Node, Request
from suanli.scheduler.policy import Policy
from suanli.scheduler.state import ClusterState


def islands_of(node: Node) -> tuple[tuple[int, ...], ...]:
    """The node's NVLink islands; an empty declaration means one island of all GPUs."""
    return node.nvlink_islands or (tuple(range(node.gpu_count)),)


def pick_gpus_in_island(state: ClusterState, node: int, count: int, milli: int = MILLI_PER_GPU) -> tuple[int, ...]:
    """``count`` GPUs of node index ``node`` with at least ``milli`` free each.

    If one island holds ``count`` fitting GPUs, take them from the island with the
    fewest fitting GPUs (ties: the island listed first), lowest indices first:
    best fit on islands keeps the larger free islands whole. Otherwise span as few
    islands as possible: fill from the island with the most fitting GPUs down.
    Returns fewer than ``count`` GPUs only if the node has fewer fitting GPUs.
    """
    if count <= 0:
        return ()
    free = state.gpu_free[node]
    per_island = [[g for g in island if free[g] >= milli] for island in islands_of(state.nodes[node])]
    fitting = [(len(gpus), k) for k, gpus in enumerate(per_island) if len(gpus) >= count]
    if fitting:
        _, k = min(fitting)
        return tuple(sorted(per_island[k])[:count])
    chosen: list[int] = []
    for k in sorted(range(len(per_island)), key=lambda k: (-len(per_island[k]), k)):
        chosen.extend(sorted(per_island[k])[: count - len(chosen)])
        if len(chosen) == count:
            break
    return tuple(sorted(chosen))


def fits_one_island(state: ClusterState, idx: np.ndarray, count: int, milli: int = MILLI_PER_GPU) -> np.ndarray:
    """For node indices ``idx``: does some island hold ``count`` GPUs with ``milli``
    free? Vectorised over nodes with the island-id matrix of ``Topology``."""
    fit = state.gpu_free[idx] >= milli
    if count <= 1:
        return fit.sum(axis=1) >= count
    topo = Topology.of(state.nodes)
    isl = topo.island[idx]
    out = np.zeros(len(idx), dtype=bool)
    for k in range(topo.max_islands):
        out |= ((isl == k) & fit).sum(axis=1) >= count
    return out


@dataclass(frozen=True)
class Topology:
    """Leaf ids per node and island ids per GPU slot.

    ``leaf[i]`` indexes ``leaves``; nodes without a declared leaf share the leaf
    named ``""`` (an unknown fabric counts as one place). ``island[i, g]`` numbers
    the islands of node i from 0 (-1 on padded slots), so "fits one island" is a
    few array passes over all nodes instead of a Python loop per node.
    """

    leaves: tuple[str, ...]
    leaf: np.ndarray  # (num_nodes,) int
    island: np.ndarray  # (num_nodes, width) int
    max_islands: int

    @classmethod
    def of(cls, nodes: list[Node]) -> Topology:
        """Built once per node list and cached: a ``ClusterState.copy()`` shares its
        node list, so what-if copies reuse the same topology."""
        hit = _CACHE.get(id(nodes))
        if hit is not None and hit[0] is nodes and len(nodes) == hit[1].leaf.size:
            return hit[1]
        names = sorted({n.ib_leaf for n in nodes})
        ids = {name: k for k, name in enumerate(names)}
        width = max((n.gpu_count for n in nodes), default=0)
        island = np.full((len(nodes), width), -1, dtype=np.int64)
        for i, node in enumerate(nodes):
            for k, gpus in enumerate(islands_of(node)):
                if any(not 0 <= g < node.gpu_count or island[i, g] >= 0 for g in gpus):
                    raise ValueError(f"node {node.name}: NVLink islands {node.nvlink_islands} must be disjoint GPU indices")
                island[i, list(gpus)] = k
        most = max((len(islands_of(n)) for n in nodes), default=0)
        topo = cls(tuple(names), np.array([ids[n.ib_leaf] for n in nodes], dtype=np.int64), island, most)
        if len(_CACHE) >= 8:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[id(nodes)] = (nodes, topo)
        return topo

    def leaf_name(self, state: ClusterState, node: str) -> str:
        return self.leaves[int(self.leaf[state.index[node]])]


_CACHE: dict[int, tuple[list[Node], Topology]] = {}


class IslandAware(Policy):
    """Any policy, made NVLink-aware for whole-GPU requests of two or more GPUs.

    Scores are lexicographic: nodes where the request fits inside one island come
    first, the inner policy's score orders nodes within each group (the inner score
    is kept in the low digits, so ties still fall to the scheduler's seeded ranks).
    GPUs are picked by ``pick_gpus_in_island``. Every other request is the inner
    policy's, untouched.
    """

    #: Larger than any inner score span (policies score 0..100 or a few thousand).
    BAND = 1 << 40

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = f"{inner.name}+islands"

    def observe(self, req: Request) -> None:
        self.inner.observe(req)

    @staticmethod
    def _applies(req: Request) -> bool:
        return not req.is_sharing and req.gpu_count >= 2

    def scores(self, state: ClusterState, req: Request, feasible: np.ndarray) -> np.ndarray:
        inner = self.inner.scores(state, req, feasible)
        if not self._applies(req):
            return inner
        return inner + self.BAND * fits_one_island(state, feasible, req.gpu_count).astype(np.int64)

    def pick_gpus(self, state: ClusterState, req: Request, node: int) -> tuple[int, ...]:
        if not self._applies(req):
            return self.inner.pick_gpus(state, req, node)
        return pick_gpus_in_island(state, node, req.gpu_count)


def in_one_island(node: Node, gpus: tuple[int, ...]) -> bool:
    """Whether GPU indices ``gpus`` of ``node`` share one NVLink island."""
    return any(set(gpus) <= set(island) for island in islands_of(node))
