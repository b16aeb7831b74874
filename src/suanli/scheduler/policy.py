"""What a placement policy is, and the shared pieces every policy uses.

A policy scores feasible nodes (higher is better) and picks GPUs inside the chosen
node. Policies whose score of a node depends only on that node's own row of the
cluster state (most of them) subclass ``NodeLocalPolicy``: their scores are cached
per request shape and recomputed only for nodes whose ``version`` changed, which
makes a cycle cost O(nodes) array work plus the few nodes touched since the last
request of the same shape.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from suanli.scheduler.model import MILLI_PER_GPU, Request
from suanli.scheduler.state import ClusterState


class Policy(ABC):
    name: str = ""

    def observe(self, req: Request) -> None:  # noqa: B027 (an optional hook, not abstract)
        """Called once per request before it is placed (online learners use it)."""

    @abstractmethod
    def scores(self, state: ClusterState, req: Request, feasible: np.ndarray) -> np.ndarray:
        """Integer scores for the node indices in ``feasible`` (same order)."""

    def pick_gpus(self, state: ClusterState, req: Request, node: int) -> tuple[int, ...]:
        """Default GPU choice: lowest-indexed fully free GPUs for whole-GPU requests,
        the tightest fitting GPU (lowest index among ties) for a shared one."""
        return pick_lowest_free(state, req, node) if not req.is_sharing else pick_tightest(state, req, node)


def pick_lowest_free(state: ClusterState, req: Request, node: int) -> tuple[int, ...]:
    if not req.gpus_used:
        return ()
    free = state.gpu_free[node]
    fitting = np.flatnonzero(free >= req.milli_per_gpu)
    return tuple(int(g) for g in fitting[: req.gpus_used])


def pick_tightest(state: ClusterState, req: Request, node: int) -> tuple[int, ...]:
    free = state.gpu_free[node].astype(np.int64)
    slack = np.where(free >= req.milli_per_gpu, free - req.milli_per_gpu, np.iinfo(np.int64).max)
    return (int(np.argmin(slack)),)


@dataclass
class _CacheEntry:
    scores: np.ndarray
    versions: np.ndarray
    extra: np.ndarray  # per-node policy data, e.g. the best GPU index for a shared request
    generation: int = 0


@dataclass
class ScoreCache:
    """Per-request-shape cache of node scores, invalidated by node versions."""

    entries: dict[tuple, _CacheEntry] = field(default_factory=dict)
    generation: int = 0

    def clear(self) -> None:
        """Forget everything (a policy whose parameters change calls this)."""
        self.generation += 1
        self.entries.clear()


def request_shape(req: Request) -> tuple:
    """What a node-local score may depend on: not memory, not priority, not the name."""
    return (req.cpu_milli, req.milli_per_gpu, req.gpus_used, tuple(sorted(req.gpu_models)))


class NodeLocalPolicy(Policy):
    """A policy whose node score is a function of that node's state alone."""

    #: Benchmarks switch this off to measure the naive rescore-everything baseline.
    use_cache: bool = True

    def __init__(self) -> None:
        self.cache = ScoreCache()

    @abstractmethod
    def node_scores(self, state: ClusterState, req: Request, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Scores for nodes ``idx`` and one int of per-node extra data each."""

    def scores(self, state: ClusterState, req: Request, feasible: np.ndarray) -> np.ndarray:
        key = request_shape(req)
        entry = self.cache.entries.get(key)
        if entry is None or entry.scores.shape[0] != state.num_nodes:
            n = state.num_nodes
            entry = _CacheEntry(np.zeros(n, np.int64), np.full(n, -1, np.int64), np.zeros(n, np.int64))
            self.cache.entries[key] = entry
        stale = feasible if not self.use_cache else feasible[entry.versions[feasible] != state.version[feasible]]
        if stale.size:
            s, extra = self.node_scores(state, req, stale)
            entry.scores[stale] = s
            entry.extra[stale] = extra
            entry.versions[stale] = state.version[stale]
        return entry.scores[feasible]

    def cached_extra(self, state: ClusterState, req: Request, node: int) -> int:
        """The per-node extra computed with the node's current score."""
        entry = self.cache.entries.get(request_shape(req))
        if entry is None or entry.versions[node] != state.version[node]:
            self.scores(state, req, np.array([node]))
            entry = self.cache.entries[request_shape(req)]
        return int(entry.extra[node])


def idle_milli(state: ClusterState, idx: np.ndarray) -> np.ndarray:
    return state.gpu_free[idx].sum(axis=1).astype(np.int64)


#: Normalisers from the FGD paper's simulator: the largest node (128 cores, 8 GPUs).
CPU_NORM = 128_000
GPU_NORM = 8 * MILLI_PER_GPU
