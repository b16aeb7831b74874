"""GpuPacking: fill partly used GPUs first, then free GPUs on used nodes, then
empty nodes.

1. only partly used GPUs needed: 100 - sum(idle % of those GPUs) / 10, at least 50;
2. fully free GPUs on a node in use: 50 - number of free GPUs taken, at least 33;
3. an entirely idle node: max(33 - its GPU count, its GPU count).
CPU-only requests score 0 everywhere. GPUs are taken tightest first.
"""

from __future__ import annotations

import numpy as np

from suanli.scheduler.model import MILLI_PER_GPU, Request
from suanli.scheduler.policy import NodeLocalPolicy
from suanli.scheduler.state import ClusterState


class GpuPacking(NodeLocalPolicy):
    name = "gpu_packing"

    def node_scores(self, state: ClusterState, req: Request, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        zeros = np.zeros(idx.size, np.int64)
        if not req.milli_per_gpu:
            return zeros, zeros
        free = state.gpu_free[idx].astype(np.int64)
        count = state.gpu_count[idx].astype(np.int64)
        fully_free = (free == MILLI_PER_GPU).sum(axis=1)
        # GPUs used: the `gpus_used` tightest among the fitting ones.
        key = np.where(free >= req.milli_per_gpu, free, np.iinfo(np.int64).max)
        chosen = np.sort(key, axis=1)[:, : req.gpus_used]
        free_taken = (chosen == MILLI_PER_GPU).sum(axis=1)
        idle_pct = (np.where(chosen <= MILLI_PER_GPU, chosen, 0) * 100 // MILLI_PER_GPU).sum(axis=1)
        case3 = np.maximum(33 - fully_free, fully_free)
        case2 = np.maximum(50 - free_taken, 33)
        case1 = np.maximum(100 - idle_pct // 10, 50)
        scores = np.where(fully_free == count, case3, np.where(free_taken > 0, case2, case1))
        return scores, zeros
