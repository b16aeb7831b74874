"""FGD: Fragmentation Gradient Descent (Weng et al., USENIX ATC'23).

Place a request where it increases the expected fragmentation of the target
workload least. The score is FGD's integer ``floor(100 * sigmoid(dF / 1000))``: the
quantisation is part of the algorithm (ties then fall to the seeded node order,
which packs), and scoring on the exact change instead loses about three points of
allocation on the Alibaba default trace (FGD_PROTOCOL.md).

Without a target workload, the target is learned online from the requests seen.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from suanli.scheduler.model import Request
from suanli.scheduler.policies.fragmentation import TargetArrays, fragmentation_after, per_task_fragmentation
from suanli.scheduler.policies.target import OnlineTarget, TargetWorkload
from suanli.scheduler.policy import NodeLocalPolicy, pick_lowest_free
from suanli.scheduler.state import ClusterState


def sigmoid_score(delta_milli: np.ndarray) -> np.ndarray:
    """FGD's integer score of a fragmentation decrease (F0 - F1), 0..100."""
    return np.floor(100.0 / (1.0 + np.exp(-delta_milli / 1000.0))).astype(np.int64)


class FGD(NodeLocalPolicy):
    name = "fgd"

    def __init__(
        self,
        target: TargetWorkload | None,
        pack_below: float = 0.0,
        pack_if: Callable[[TargetWorkload], bool] | None = None,
        pack_latch: int | None = None,
    ) -> None:
        super().__init__()
        self.online: OnlineTarget | None = None
        if target is None:  # learn the target from the requests as they arrive
            self.online = OnlineTarget()
            target = self.online.current
        self.target = target
        self._arrays: TargetArrays | None = None
        self._models: list[str] | None = None
        #: Off in FGD (Suanli's policies set it): below this share of the GPU milli
        #: allocated, plan on no mix, so that every placement ties and the seeded node
        #: order packs the work; only for a mix ``pack_if`` accepts (None: any mix;
        #: issue 16, sessions 36-37).
        self.pack_below = pack_below
        self.pack_if = pack_if
        #: A learned mix swings across ``pack_if`` while it is young: once the gate opens
        #: on a mix learned from at least this many requests, it stays open (None: asked
        #: every time; issue 16, session 38).
        self.pack_latch = pack_latch
        self._pack_latched = False
        self._packing = False
        #: f(n, m) per node as of its version, for the mix and cluster it was computed for
        self._per_task: tuple[TargetArrays, dict[str, int], np.ndarray, np.ndarray] | None = None
        self._no_mix: TargetArrays | None = None

    def observe(self, req: Request) -> None:
        if self.online is not None and self.online.observe(req):
            self.target = self.online.current
            self._arrays = None
            self.cache.clear()

    def scores(self, state: ClusterState, req: Request, feasible: np.ndarray) -> np.ndarray:
        packing = (
            self.pack_below > 0
            and self.packs_for_mix()  # cached per mix: before the sums
            and state.used_gpu_milli < self.pack_below * state.total_gpu_milli
        )
        if packing != self._packing:  # every kept score was made for the other mix
            self._packing = packing
            self.cache.clear()
        return super().scores(state, req, feasible)

    def packs_for_mix(self) -> bool:
        """Whether ``pack_if`` accepts the mix planned for, or accepted a mix learned from
        ``pack_latch`` requests or more."""
        if self.pack_if is None or self._pack_latched:
            return True
        packs = self.pack_if(self.target)
        learned = self.online is not None and self.pack_latch is not None and self.online.seen >= self.pack_latch
        self._pack_latched = packs and learned
        return packs

    def arrays(self, state: ClusterState) -> TargetArrays:
        """The mix planned for (none while packing: ``pack_below``)."""
        if self._arrays is None or self._models != state.models:
            self._arrays = TargetArrays.build(self.target, state.models)
            self._no_mix = TargetArrays.build(TargetWorkload((), np.zeros(0)), state.models) if self.pack_below else None
            self._models = state.models
        return self._no_mix if self._packing and self._no_mix is not None else self._arrays

    def fragmentation_change(self, state: ClusterState, req: Request, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """F0 - F1 per hypothetical placement: (K, G) for a shared request, with the
        mask of the GPUs it fits, (K, 1) otherwise. Taken per task, then weighted: a
        placement that changes no task's f scores exactly 0 (FGD's 50), never a
        rounding error's 49."""
        t = self.arrays(state)
        f1, fit = fragmentation_after(state, idx, req.milli_per_gpu, req.gpus_used, req.cpu_milli, req.is_sharing, t)
        return (self.per_task_now(state, idx)[:, None, :] - f1) @ t.weights, fit

    def per_task_now(self, state: ClusterState, idx: np.ndarray) -> np.ndarray:
        """f(n, m) of nodes ``idx`` as they are now, (K, M), kept per node version:
        every request shape scored on a node asks for the same rows."""
        t = self.arrays(state)
        kept = self._per_task
        if kept is None or kept[0] is not t or kept[1] is not state.index:
            rows = np.zeros((state.num_nodes, t.milli.size), np.int64)
            kept = self._per_task = (t, state.index, rows, np.full(state.num_nodes, -1, np.int64))
        _, _, rows, versions = kept
        stale = idx[versions[idx] != state.version[idx]]
        if stale.size:
            rows[stale] = per_task_fragmentation(state.gpu_free[stale], state.cpu_free[stale], state.model_id[stale], t)
            versions[stale] = state.version[stale]
        return rows[idx]

    def node_scores(self, state: ClusterState, req: Request, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if idx.size > 64:
            # Cold start of a request shape: many nodes are in identical states (every
            # empty node of a type), so score each distinct state once.
            rows = np.column_stack((state.model_id[idx], state.cpu_free[idx], state.gpu_free[idx]))
            _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
            if first.size < idx.size:
                scores, gpus = self._score(state, req, idx[first])
                return scores[inverse.ravel()], gpus[inverse.ravel()]
        return self._score(state, req, idx)

    def _score(self, state: ClusterState, req: Request, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        delta, fit = self.fragmentation_change(state, req, idx)
        scores = np.where(fit, sigmoid_score(delta), -1)
        return scores.max(axis=1), scores.argmax(axis=1)

    def pick_gpus(self, state: ClusterState, req: Request, node: int) -> tuple[int, ...]:
        if req.is_sharing:
            return (self.cached_extra(state, req, node),)
        return pick_lowest_free(state, req, node)
