"""Expected GPU fragmentation of a node with respect to a target workload.

FGD's measure (Weng et al., ATC'23, section 4): for a typical task m, the idle GPU
milli of node n that m could never use, f(n, m):

* m needs no GPU, or n's GPU model is not allowed for m: all idle milli, I(n);
* n can host m (enough GPUs with idle >= m's share, and enough CPU): the idle milli
  on GPUs too small for m;
* otherwise: I(n).

F(n) = sum_m p_m f(n, m). Everything here is vectorised over a batch of K node
states (K x G free-milli rows), so a policy can evaluate every hypothetical
placement of a request in one pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from suanli.scheduler.policies.target import TargetWorkload
from suanli.scheduler.state import ClusterState


@dataclass(frozen=True)
class TargetArrays:
    """The target workload as arrays, resolved against one cluster's GPU models."""

    milli: np.ndarray  # (M,)
    gpus: np.ndarray  # (M,)
    cpu: np.ndarray  # (M,)
    memory: np.ndarray  # (M,) mean MiB of the shape's requests (0: not known)
    model_ok: np.ndarray  # (M, num_models) bool
    weights: np.ndarray  # (M,)
    #: the distinct GPU shares among ``milli`` (U of them, U << M: many shapes share a size),
    #: and each shape's index into them; GPU fit is computed per size and spread to shapes
    sizes: np.ndarray  # (U,)
    size_of: np.ndarray  # (M,)

    @classmethod
    def build(cls, target: TargetWorkload, models: list[str]) -> TargetArrays:
        lower = [m.lower() for m in models]
        ok = np.ones((len(target), len(models)), dtype=bool)
        for k, shape in enumerate(target.shapes):
            if shape.gpu_models:
                allowed = {m.lower() for m in shape.gpu_models}
                ok[k] = [m in allowed for m in lower]
        milli = np.array([s.milli_per_gpu for s in target.shapes], dtype=np.int64)
        sizes, size_of = np.unique(milli, return_inverse=True)
        return cls(
            milli=milli,
            gpus=np.array([s.gpus for s in target.shapes], dtype=np.int64),
            cpu=np.array([s.cpu_milli for s in target.shapes], dtype=np.int64),
            memory=np.zeros(len(target)) if target.memory_mib is None else target.memory_mib,
            model_ok=ok,
            weights=np.asarray(target.weights, dtype=np.float64),
            sizes=sizes,
            size_of=size_of.ravel(),
        )


def per_task_fragmentation(gpu_free: np.ndarray, cpu_free: np.ndarray, model_id: np.ndarray, t: TargetArrays) -> np.ndarray:
    """f(n, m) for K node states: (K, G), (K,), (K,) -> (K, M) in milli."""
    free = gpu_free.astype(np.int64)
    idle = free.sum(axis=1)
    fits = free[:, :, None] >= t.sizes  # (K, G, U)
    small = np.where(fits, 0, free[:, :, None]).sum(axis=1)[:, t.size_of]  # (K, M): idle on GPUs too small for m
    can_host = (
        (fits.sum(axis=1)[:, t.size_of] >= t.gpus[None, :])
        & (cpu_free[:, None] >= t.cpu[None, :])
        & t.model_ok[:, model_id].T
        & (t.milli[None, :] > 0)
    )
    return np.where(can_host, small, idle[:, None])


def node_fragmentation(gpu_free: np.ndarray, cpu_free: np.ndarray, model_id: np.ndarray, t: TargetArrays) -> np.ndarray:
    """F(n) = sum_m p_m f(n, m) for K node states."""
    if t.weights.size == 0:
        return np.zeros(gpu_free.shape[0])
    return per_task_fragmentation(gpu_free, cpu_free, model_id, t) @ t.weights


def fits_after_share(free: np.ndarray, milli: int, t: TargetArrays) -> np.ndarray:
    """(K, G, M): GPUs of node k with room for task m once a share of ``milli`` takes
    GPU g. Charging g changes only g's fit, so the node's counts are updated, not
    recomputed; counted per distinct size (U), then spread to the shapes (M)."""
    need = t.sizes[None, None, :]  # (1, 1, U)
    x = free[:, :, None]  # (K, G, 1): GPU g before
    return ((x >= need).sum(axis=1)[:, None, :] - (x >= need) + (x - milli >= need))[:, :, t.size_of]


def fragmentation_after(
    state: ClusterState, idx: np.ndarray, milli: int, gpus: int, cpu: int, sharing: bool, t: TargetArrays
) -> tuple[np.ndarray, np.ndarray]:
    """f(n, m) after placing a request on each node of ``idx``, and a mask of legal choices.

    A shared request is tried on every GPU: (K, G, M) results, False in the (K, G) mask
    where the GPU does not fit. Charging GPU i only changes that GPU's terms, so the
    per-size counts are updated from the node's current ones instead of recomputed:
    O(K*G*M) rather than O(K*G*M*G). Other requests take ``gpus`` GPUs in ascending idle
    order among those that fit (the lowest indices first for whole GPUs): (K, 1, M).
    Per task, not weighted: a caller takes the change per task first, so a task whose
    f is unchanged adds exactly 0, however the weighted sums would round.
    """
    free = state.gpu_free[idx].astype(np.int64)
    cpu_after = state.cpu_free[idx] - cpu
    model = state.model_id[idx]
    if not sharing:
        hyp = free.copy()
        if gpus:
            key = np.where(free >= milli, free, np.iinfo(np.int64).max)
            order = np.argsort(key, axis=1, kind="stable")[:, :gpus]
            np.put_along_axis(hyp, order, np.take_along_axis(hyp, order, axis=1) - milli, axis=1)
        f1 = per_task_fragmentation(hyp, cpu_after, model, t)
        return f1[:, None, :], np.ones((len(idx), 1), dtype=bool)
    need = t.sizes[None, None, :]  # (1, 1, U)
    x = free[:, :, None]  # (K, G, 1): GPU i before
    y = x - milli  # after
    small_now = np.where(x >= need, 0, x).sum(axis=1)
    small = (small_now[:, None, :] - np.where(x < need, x, 0) + np.where(y < need, y, 0))[:, :, t.size_of]
    fits = fits_after_share(free, milli, t)
    idle = free.sum(axis=1)[:, None, None] - milli
    ok = t.model_ok[:, model].T[:, None, :] & (t.milli > 0)
    can_host = (fits >= t.gpus) & (cpu_after[:, None, None] >= t.cpu) & ok
    return np.where(can_host, small, idle), free >= milli
