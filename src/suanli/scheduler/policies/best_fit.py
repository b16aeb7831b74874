"""BestFit: the node with the least weighted CPU + GPU left after placement.

raw = floor(100 * (1 - [0.5 * cpu_left_after / 128000 + 0.5 * gpu_left_after / 8000])),
then min-max normalised over the feasible nodes to 0..100 (integer division), as
the reference simulator does; normalising keeps the ranking and merges ties the
same way.
"""

from __future__ import annotations

import numpy as np

from suanli.scheduler.model import Request
from suanli.scheduler.policy import CPU_NORM, GPU_NORM, NodeLocalPolicy, idle_milli
from suanli.scheduler.state import ClusterState


class BestFit(NodeLocalPolicy):
    name = "best_fit"

    def node_scores(self, state: ClusterState, req: Request, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cpu_left = (state.cpu_free[idx] - req.cpu_milli) / CPU_NORM
        gpu_left = (idle_milli(state, idx) - req.total_gpu_milli) / GPU_NORM
        raw = np.floor(100 * (1 - (0.5 * cpu_left + 0.5 * gpu_left))).astype(np.int64)
        return raw, np.zeros(idx.size, np.int64)

    def scores(self, state: ClusterState, req: Request, feasible: np.ndarray) -> np.ndarray:
        raw = super().scores(state, req, feasible)
        lo, hi = raw.min(), raw.max()
        if hi == lo:
            return np.zeros_like(raw)
        return (raw - lo) * 100 // (hi - lo)
