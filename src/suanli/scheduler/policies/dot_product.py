"""DotProduct (Tetris-like): prefer the node whose free (CPU, GPU) vector is least
aligned with the demand, score = floor(100 * (1 - dot / 2)) on vectors normalised
by the largest node (128 cores, 8 GPUs)."""

from __future__ import annotations

import numpy as np

from suanli.scheduler.model import Request
from suanli.scheduler.policy import CPU_NORM, GPU_NORM, NodeLocalPolicy, idle_milli
from suanli.scheduler.state import ClusterState


class DotProduct(NodeLocalPolicy):
    name = "dot_product"

    def node_scores(self, state: ClusterState, req: Request, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dot = (state.cpu_free[idx] / CPU_NORM) * (req.cpu_milli / CPU_NORM) + (idle_milli(state, idx) / GPU_NORM) * (
            req.total_gpu_milli / GPU_NORM
        )
        return np.floor(100 * (1 - dot / 2)).astype(np.int64), np.zeros(idx.size, np.int64)
