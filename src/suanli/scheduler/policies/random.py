"""Random: any feasible node and any fitting GPU, uniformly (the paper's floor)."""

from __future__ import annotations

import numpy as np

from suanli.scheduler.model import Request
from suanli.scheduler.policy import Policy, pick_lowest_free
from suanli.scheduler.state import ClusterState


class RandomPolicy(Policy):
    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def scores(self, state: ClusterState, req: Request, feasible: np.ndarray) -> np.ndarray:
        scores = np.zeros(feasible.size, dtype=np.int64)
        scores[self.rng.integers(feasible.size)] = 100
        return scores

    def pick_gpus(self, state: ClusterState, req: Request, node: int) -> tuple[int, ...]:
        if not req.is_sharing:
            return pick_lowest_free(state, req, node)
        fitting = np.flatnonzero(state.gpu_free[node] >= req.milli_per_gpu)
        return (int(self.rng.choice(fitting)),)
