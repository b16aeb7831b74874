"""GpuClustering: keep GPU workloads of one class ("share", "1-gpu", "8-gpu", ...)
together. Score bands: node holding only this class 75-100, this class among
others 50-75, no GPU workload yet 25-50, only other classes 0-25; inside a band,
+25 * (8000 - idle milli) // 8000. CPU-only requests score 0 everywhere."""

from __future__ import annotations

import numpy as np

from suanli.scheduler.model import Request
from suanli.scheduler.policy import GPU_NORM, NodeLocalPolicy, idle_milli
from suanli.scheduler.state import ClusterState, workload_class


class GpuClustering(NodeLocalPolicy):
    name = "gpu_clustering"

    def node_scores(self, state: ClusterState, req: Request, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        zeros = np.zeros(idx.size, np.int64)
        if not req.milli_per_gpu:
            return zeros, zeros
        mine = state.class_counts(workload_class(req.milli_per_gpu, req.gpus_used))[idx] > 0
        classes_present = sum((c[idx] > 0).astype(np.int64) for c in state.classes.values())
        band = np.select([mine & (classes_present == 1), mine, classes_present == 0], [75, 50, 25], default=0)
        used = 25 * (GPU_NORM - idle_milli(state, idx)) // GPU_NORM
        return band + used, zeros
