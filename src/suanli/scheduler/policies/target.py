"""The target workload: the request mix a fragmentation-aware policy plans for.

FGD (Weng et al., ATC'23) measures fragmentation against "typical" tasks: the pod
shapes of the trace, most frequent first, cut at 95 % of all pods. ``from_requests``
builds exactly that. ``OnlineTarget`` learns the same mix from the requests seen so
far, for a live platform that does not know its future workload.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from suanli.scheduler.model import MILLI_PER_GPU, Request


@dataclass(frozen=True)
class TaskShape:
    cpu_milli: int
    milli_per_gpu: int
    gpus: int
    gpu_models: tuple[str, ...] = ()

    @classmethod
    def of(cls, req: Request) -> TaskShape:
        return cls(req.cpu_milli, req.milli_per_gpu, req.gpus_used, tuple(sorted(req.gpu_models)))

    def request(self) -> Request:
        """A request of this shape, asking for no memory (a shape does not hold it;
        the mix's ``memory_mib`` has each shape's mean)."""
        whole = self.milli_per_gpu >= MILLI_PER_GPU
        return Request(
            cpu_milli=self.cpu_milli,
            gpu_count=self.gpus if whole else 0,
            gpu_milli=0 if whole else self.milli_per_gpu,
            gpu_models=frozenset(self.gpu_models),
        )


@dataclass(frozen=True)
class TargetWorkload:
    shapes: tuple[TaskShape, ...]
    weights: np.ndarray  # probabilities, same order as shapes
    #: Every shape counted, the 5 % tail too (None: ``shapes`` are all there is). FGD
    #: scores against the cut mix; a rehearsal (``rehearsal.py``) draws from this one:
    #: the tail holds rare model lists, and rehearsing without them gave key 1 the
    #: wrong sign on gpuspec25 and g-mix-all (issue 16, BENCHMARKS.md).
    whole: TargetWorkload | None = None
    #: Mean memory (MiB) of each shape's requests, same order as shapes (None: not known).
    #: Not part of a shape, so it moves neither FGD's cut of the mix nor its score; the
    #: policy's key 2 keeps memory next to idle GPUs with it (``policies/suanli.py``).
    memory_mib: np.ndarray | None = None

    @classmethod
    def from_counts(
        cls, counts: Counter[TaskShape], coverage: float = 0.95, memory_mib: Mapping[TaskShape, float] | None = None
    ) -> TargetWorkload:
        """Keep the most frequent shapes until they cover ``coverage`` of all requests
        (ties: larger cpu, milli, count, then models first), then renormalise.
        ``memory_mib``: the mean memory of each shape's requests, where known."""
        total = sum(counts.values())
        if total == 0:
            return cls((), np.zeros(0))
        ordered = sorted(
            counts.items(),
            key=lambda kv: (kv[1], kv[0].cpu_milli, kv[0].milli_per_gpu, kv[0].gpus, "|".join(kv[0].gpu_models)),
            reverse=True,
        )
        kept, covered = [], 0
        for shape, count in ordered:
            kept.append((shape, count))
            covered += count
            if covered >= coverage * total:
                break

        def memory(shapes: list[TaskShape]) -> np.ndarray | None:
            return None if memory_mib is None else np.array([memory_mib.get(s, 0.0) for s in shapes], dtype=np.float64)

        weights = np.array([c for _, c in kept], dtype=np.float64)
        shapes = [s for s, _ in kept]
        if len(kept) == len(ordered):
            return cls(tuple(shapes), weights / weights.sum(), None, memory(shapes))
        every = np.array([c for _, c in ordered], dtype=np.float64)
        all_shapes = [s for s, _ in ordered]
        whole = cls(tuple(all_shapes), every / every.sum(), None, memory(all_shapes))
        return cls(tuple(shapes), weights / weights.sum(), whole, memory(shapes))

    @classmethod
    def from_requests(cls, requests: Iterable[Request], coverage: float = 0.95) -> TargetWorkload:
        counts: Counter[TaskShape] = Counter()
        memory: Counter[TaskShape] = Counter()
        for r in requests:
            shape = TaskShape.of(r)
            counts[shape] += 1
            memory[shape] += r.memory_mib
        return cls.from_counts(counts, coverage, _means(memory, counts))

    def __len__(self) -> int:
        return len(self.shapes)

    @cached_property
    def restricted_share(self) -> float:
        """The share of requests restricted to GPU model lists, tail included."""
        mix = self.whole or self
        return float(sum(w for shape, w in zip(mix.shapes, mix.weights) if shape.gpu_models))

    @cached_property
    def multi_gpu_share(self) -> float:
        """The share of the GPU milli asked for by requests for two GPUs or more, tail included."""
        mix = self.whole or self
        milli = np.array([s.milli_per_gpu * s.gpus for s in mix.shapes], dtype=np.float64)
        multi = np.array([s.gpus >= 2 for s in mix.shapes], dtype=bool)
        total = float(mix.weights @ milli) if milli.size else 0.0
        return float(mix.weights[multi] @ milli[multi]) / total if total > 0 else 0.0


class OnlineTarget:
    """Learns the target from arriving requests.

    Every ``check_every`` requests it re-derives the mix and adopts it only if it
    drifted by more than ``drift`` (total variation distance) from the one in use:
    a policy caching scores per target then re-plans a handful of times while the
    mix settles, instead of after every request.
    """

    def __init__(self, check_every: int = 32, drift: float = 0.05, coverage: float = 0.95) -> None:
        self.counts: Counter[TaskShape] = Counter()
        self.memory: Counter[TaskShape] = Counter()  #: memory MiB asked per shape, summed
        self.check_every = check_every
        self.drift = drift
        self.coverage = coverage
        self.seen = 0
        self.current = TargetWorkload((), np.zeros(0))

    def observe(self, req: Request) -> bool:
        """Count ``req``; return True when the target in use changed."""
        shape = TaskShape.of(req)
        self.counts[shape] += 1
        self.memory[shape] += req.memory_mib
        self.seen += 1
        if self.seen % self.check_every and self.seen > 1:
            return False
        candidate = self.derive()
        if distance(candidate, self.current) <= self.drift:
            return False
        self.current = candidate
        return True

    def derive(self) -> TargetWorkload:
        """The mix the counts so far say (experiments derive it other ways: issue 16's
        ``bench/fill_quality.py`` mix variants)."""
        return TargetWorkload.from_counts(self.counts, self.coverage, _means(self.memory, self.counts))


def _means(sums: Counter[TaskShape], counts: Counter[TaskShape]) -> dict[TaskShape, float]:
    return {s: sums[s] / n for s, n in counts.items()}


def distance(a: TargetWorkload, b: TargetWorkload) -> float:
    """Total variation distance between two mixes (shapes missing from one weigh 0)."""
    pa = dict(zip(a.shapes, a.weights))
    pb = dict(zip(b.shapes, b.weights))
    return 0.5 * sum(abs(pa.get(s, 0.0) - pb.get(s, 0.0)) for s in pa.keys() | pb.keys())
