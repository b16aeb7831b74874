"""FirstFit: every feasible node scores the same, so the first node in the seeded
node order that fits wins. The classic baseline of time-based replays."""

from __future__ import annotations

import numpy as np

from suanli.scheduler.model import Request
from suanli.scheduler.policy import Policy
from suanli.scheduler.state import ClusterState


class FirstFit(Policy):
    name = "first_fit"

    def scores(self, state: ClusterState, req: Request, feasible: np.ndarray) -> np.ndarray:
        return np.zeros(feasible.size, dtype=np.int64)
