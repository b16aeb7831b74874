"""Shares placed by the patterns of the mix's best packing (``SuanliPolicy``'s key 5).

Why: at the end of a fill almost all idle GPU capacity is gaps on GPUs holding shares,
and how much is a bin-packing question: which shares end up together on a GPU. FGD,
like Best Fit, puts each share where it fits best now and leaves GPUs whose gap no
share of the mix fills. With the mix known (its share sizes and how often each comes),
the cutting-stock linear program (Gilmore and Gomory) says which combinations of sizes
fill a GPU best and how many GPUs of each the mix needs per share. Following it online
is the pattern-based stochastic bin packing of Csirik et al. and of Gupta and
Radovanovic, whose waste stays near the program's: a GPU that a share opens is given the
pattern furthest behind its rate, and a later share of a size the GPU still misses goes
there first. A share may take a slot up to ``TOLERANCE`` milli larger than itself (460
for a 470): near sizes are interchangeable, and a slot held for an exact size that
never comes is a gap.

Packing the default trace's shares alone (``bench/share_packing.py``: nodes and CPU
ignored, seeds 42-43), the waste was 4.27 / 4.26 points of the cluster with Best Fit,
3.94 / 3.92 following the patterns and 3.84 / 3.81 at the program's optimum; in the fill
experiment the key, with keys 1-4, took ``suanli`` from a 5.06 % to a 9.26 % cut of FGD's
unallocated share over 61 traces (issue 16, session 43, BENCHMARKS.md).

The book only remembers what the policy chose: a plan whose GPU has less room than the
plan still misses (someone else took it, or the placement was not made) is dropped, and
so is one whose GPU was freed (its shares ended): it starts afresh. It is a preference among feasible placements, never a
constraint, so a stale plan costs packing, not correctness.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from suanli.scheduler.model import MILLI_PER_GPU
from suanli.scheduler.policies.target import TargetWorkload
from suanli.scheduler.state import ClusterState

#: a share may take a slot held for a size up to this much larger than its own
TOLERANCE = 30


@dataclass(frozen=True)
class Pattern:
    """Share sizes that fill one GPU together, and how many such GPUs the mix needs per share."""

    sizes: tuple[tuple[int, int], ...]  # (milli, count), largest first
    rate: float


def share_sizes(mix: TargetWorkload) -> dict[int, float]:
    """The mix's one-GPU shares: milli -> probability among all its requests (the
    whole mix, the rare tail included)."""
    whole = mix.whole or mix
    out: dict[int, float] = {}
    for shape, weight in zip(whole.shapes, whole.weights, strict=True):
        if shape.gpus == 1 and 0 < shape.milli_per_gpu < MILLI_PER_GPU:
            out[shape.milli_per_gpu] = out.get(shape.milli_per_gpu, 0.0) + float(weight)
    return out


def _maximal(sizes: list[int]) -> Iterator[tuple[int, ...]]:
    """Counts per size (largest first) of every GPU-full combination: no size fits in
    what is left. Only those are needed, since the program covers each size at least."""
    smallest = min(sizes)

    def rec(i: int, left: int, counts: list[int]) -> Iterator[tuple[int, ...]]:
        if i == len(sizes):
            if left < smallest and any(counts):
                yield tuple(counts)
            return
        for k in range(left // sizes[i] + 1):
            counts.append(k)
            yield from rec(i + 1, left - k * sizes[i], counts)
            counts.pop()

    return rec(0, MILLI_PER_GPU, [])


def solve(shares: dict[int, float]) -> list[Pattern]:
    """The fewest GPUs per share that hold every size at its probability: the cutting-stock
    program over the maximal combinations (GLOP). Rates are per share of the mix."""
    from ortools.linear_solver import pywraplp  # here: importing the policies stays light

    sizes = sorted(shares, reverse=True)
    if not sizes:
        return []
    combos = list(_maximal(sizes))
    solver = pywraplp.Solver.CreateSolver("GLOP")
    x = [solver.NumVar(0.0, solver.infinity(), "") for _ in combos]
    for j, size in enumerate(sizes):
        solver.Add(sum(c[j] * x[i] for i, c in enumerate(combos) if c[j]) >= shares[size])
    solver.Minimize(sum(x))
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return []
    per_share = sum(shares.values())
    return [
        Pattern(tuple((size, n) for size, n in zip(sizes, c, strict=True) if n), x[i].solution_value() / per_share)
        for i, c in enumerate(combos)
        if x[i].solution_value() > 1e-9
    ]


class PatternBook:
    """Which GPUs were opened for which pattern, and the share sizes each still misses."""

    def __init__(self, patterns: list[Pattern], tolerance: int = TOLERANCE) -> None:
        self.patterns = patterns
        self.tolerance = tolerance
        self.opened: Counter[int] = Counter()  # pattern index -> GPUs opened with it
        self.shares = 0  # shares placed so far (the patterns' rates are per share)
        #: (node name, GPU index) -> sizes it misses
        self.plans: dict[tuple[str, int], Counter[int]] = {}
        #: size -> the GPUs missing it (insertion-ordered, so choices are deterministic)
        self._waiting: dict[int, dict[tuple[str, int], None]] = {}
        #: every plan as a row of ``planned``'s arrays (rows of dropped plans are dead until
        #: the arrays are compacted), and the node index the node column was built with
        self._rows: dict[tuple[str, int], int] = {}
        self._names: list[str] = []
        self._node = np.zeros(0, np.int64)
        self._gpu = np.zeros(0, np.int64)
        self._live = np.zeros(0, bool)
        self._index: dict[str, int] | None = None

    def follow(self, patterns: list[Pattern]) -> None:
        """Plan with another mix's patterns from now on (a learned mix moved): the GPUs
        opened so far keep their plans, and the counts of the patterns in both carry over."""
        by_sizes = {p.sizes: k for k, p in enumerate(patterns)}
        self.opened = Counter(
            {by_sizes[p.sizes]: n for k, p in enumerate(self.patterns) if (n := self.opened[k]) and p.sizes in by_sizes}
        )
        self.patterns = patterns

    def slots(self, state: ClusterState, milli: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Node indices, GPU indices and the held size of every slot a share of ``milli``
        may take (a missing size from ``milli`` to ``milli + tolerance`` on a GPU with the
        room), dropping plans whose GPU no longer has room for what they miss."""
        nodes: list[int] = []
        gpus: list[int] = []
        held: list[int] = []
        for size in [s for s in self._waiting if milli <= s <= milli + self.tolerance]:
            for key in list(self._waiting.get(size, ())):
                i = state.index.get(key[0])
                if i is None or not self._valid(state, i, key):
                    self._drop(key)
                    continue
                if state.gpu_free[i, key[1]] >= milli:
                    nodes.append(i)
                    gpus.append(key[1])
                    held.append(size)
        return np.array(nodes, np.int64), np.array(gpus, np.int64), np.array(held, np.int64)

    def best_slots(self, state: ClusterState, milli: int) -> dict[int, int]:
        """Per node with a slot for a share of ``milli``: the GPU it takes there (the slot
        held for the nearest size, then the fullest GPU), best node first."""
        nodes, gpus, held = self.slots(state, milli)
        best: dict[int, int] = {}
        for i in np.lexsort((state.gpu_free[nodes, gpus], held)):
            best.setdefault(int(nodes[i]), int(gpus[i]))
        return best

    def planned(self, state: ClusterState) -> tuple[np.ndarray, np.ndarray]:
        """Node and GPU indices of every GPU that waits for shares (-1: a node not in
        ``state``; a plan gone stale is in until ``slots`` or ``placed`` meet it). Kept as
        arrays that plans are added to and dropped from: every share asks."""
        if self._index is not state.index:  # another snapshot (the live loop's next pass)
            self._node = np.full(self._live.size, -1, np.int64)
            self._node[: len(self._names)] = [state.index.get(n, -1) for n in self._names]
            self._index = state.index
        return self._node[self._live], self._gpu[self._live]

    def _add_row(self, state: ClusterState, key: tuple[str, int]) -> None:
        n = len(self._names)
        if n == self._live.size:  # full: compact the live rows, and make room
            keys = list(self._rows)
            size = max(64, 2 * len(keys))
            self._names = [name for name, _ in keys]
            self._node = np.resize(np.fromiter((state.index.get(k, -1) for k in self._names), np.int64, len(keys)), size)
            self._gpu = np.resize(np.fromiter((gpu for _, gpu in keys), np.int64, len(keys)), size)
            self._live = np.zeros(size, bool)
            self._live[: len(keys)] = True
            self._rows = {k: i for i, k in enumerate(keys)}
            self._index = state.index
            n = len(keys)
        if self._index is not state.index:
            self.planned(state)
        self._rows[key] = n
        self._names.append(key[0])
        self._node[n], self._gpu[n], self._live[n] = state.index[key[0]], key[1], True

    def _remove_row(self, key: tuple[str, int]) -> None:
        row = self._rows.pop(key, None)
        if row is not None:
            self._live[row] = False

    def placed(self, state: ClusterState, node: int, gpu: int, milli: int) -> None:
        """A share of ``milli`` goes to ``gpu`` of ``node`` (called before it is bound):
        it fills a slot there, or opens the GPU with the pattern furthest behind its rate."""
        key = (state.nodes[node].name, gpu)
        self.shares += 1
        plan = self.plans.get(key)
        if plan is not None and self._valid(state, node, key):
            fitting = [s for s, n in plan.items() if n and milli <= s <= milli + self.tolerance]
            if fitting:
                self._take(key, min(fitting))
            return
        self._drop(key)
        if state.gpu_free[node, gpu] != MILLI_PER_GPU:
            return  # a GPU opened before or without a plan: nothing to follow
        best = min(
            (k for k, p in enumerate(self.patterns) if any(s == milli for s, _ in p.sizes)),
            key=lambda k: self.opened[k] - self.patterns[k].rate * self.shares,
            default=None,
        )
        if best is None:
            return
        self.opened[best] += 1
        missing = Counter(dict(self.patterns[best].sizes))
        missing[milli] -= 1
        if +missing:
            self.plans[key] = +missing
            self._add_row(state, key)
            for size in +missing:
                self._waiting.setdefault(size, {})[key] = None

    def _valid(self, state: ClusterState, node: int, key: tuple[str, int]) -> bool:
        """The GPU still holds some of its pattern (freed, it holds none: the shares
        ended) and has the room for what the plan misses."""
        plan = self.plans.get(key)
        free = state.gpu_free[node, key[1]]
        return plan is not None and MILLI_PER_GPU > free >= sum(s * n for s, n in plan.items())

    def _take(self, key: tuple[str, int], size: int) -> None:
        plan = self.plans[key]
        plan[size] -= 1
        if plan[size] == 0:
            del plan[size]
            self._waiting[size].pop(key, None)
        if not plan:
            del self.plans[key]
            self._remove_row(key)

    def _drop(self, key: tuple[str, int]) -> None:
        self._remove_row(key)
        for size in self.plans.pop(key, Counter()):
            self._waiting[size].pop(key, None)
