"""A synthetic gang workload on a topology-annotated inventory, and its replay.

No public trace records multi-node gangs with their topology, so the workload is
generated, seeded, from a fixed job mix (``JOB_MIX``): single-node jobs of 1-8
GPUs that churn the nodes, and gangs of 2-16 full 8-GPU nodes. Each job pins one
GPU model, drawn in proportion to that model's GPUs, as a real distributed job
asks for one GPU type. Arrivals are Poisson and durations exponential (mean
``mean_duration``); the arrival rate is set so the offered GPU demand is ``load``
x the inventory's GPUs (Little's law: rate = load x GPUs / (mean duration x mean
GPUs per job)).

``replay`` is a loss system: a job placed at arrival holds its GPUs until it ends;
a job that does not fit is rejected (no queue; the queueing replay lives in
``sim/replay.py``). Its two arms differ only in placement:

* topology-aware: gangs by ``plan_gang`` (one IB leaf first, fewest leaves
  otherwise), single-node jobs through an ``IslandAware`` policy;
* topology-blind: the same policy placing each gang member in turn
  (``plan_blind``) and GPUs lowest-index first.

It reports the share of gangs inside one leaf, leaves per gang, rejections, the
share of single-node multi-GPU jobs inside one NVLink island, and GPU utilisation.

``trace_pods`` turns the same jobs into trace rows for the queueing replay
(``sim/replay.py``), a seeded share of them spot: there gangs wait for capacity,
get spot victims on every node they lack (or none), and are reclaimed whole.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from suanli.scheduler import ClusterState, Node, Request, Scheduler, TargetWorkload, make_policy
from suanli.scheduler.gang import member_of, place_gang, unplace_gang
from suanli.scheduler.topology import IslandAware, Topology, in_one_island
from suanli.sim.traces import TracePod

#: (nodes, GPUs per node, weight by job count).
JOB_MIX: tuple[tuple[int, int, int], ...] = (
    (1, 1, 30),
    (1, 2, 12),
    (1, 4, 12),
    (1, 8, 16),
    (2, 8, 12),
    (4, 8, 9),
    (8, 8, 6),
    (16, 8, 3),
)
CPU_PER_GPU = 12_000
MIB_PER_GPU = 64 * 1024


@dataclass(frozen=True)
class GangJob:
    key: int
    request: Request
    arrival: float
    duration: float


def job_models(nodes: Sequence[Node]) -> tuple[list[str], np.ndarray]:
    """GPU models that have 8-GPU nodes, and each model's share of their GPUs."""
    gpus: dict[str, int] = {}
    for n in nodes:
        if n.gpu_count == 8:
            gpus[n.gpu_model] = gpus.get(n.gpu_model, 0) + n.gpu_count
    models = sorted(gpus)
    weights = np.array([gpus[m] for m in models], dtype=float)
    return models, weights / weights.sum()


def generate_jobs(
    nodes: Sequence[Node],
    count: int,
    load: float = 0.85,
    seed: int = 0,
    mean_duration: float = 3600.0,
    mix: Sequence[tuple[int, int, int]] = JOB_MIX,
) -> list[GangJob]:
    """``count`` jobs, deterministic for a seed."""
    rng = np.random.default_rng(seed)
    models, model_p = job_models(nodes)
    if not models:
        raise ValueError("the inventory has no 8-GPU nodes to host gangs")
    shape_p = np.array([w for *_, w in mix], dtype=float)
    shape_p /= shape_p.sum()
    mean_gpus = float(sum(p * n * g for p, (n, g, _) in zip(shape_p, mix)))
    capacity = sum(n.gpu_count for n in nodes if n.gpu_model in models)
    rate = load * capacity / (mean_duration * mean_gpus)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, count))
    durations = rng.exponential(mean_duration, count)
    shapes = rng.choice(len(mix), size=count, p=shape_p)
    picks = rng.choice(len(models), size=count, p=model_p)
    jobs = []
    for k in range(count):
        n, g, _ = mix[int(shapes[k])]
        req = Request(
            cpu_milli=g * CPU_PER_GPU,
            memory_mib=g * MIB_PER_GPU,
            gpu_count=g,
            gpu_models=frozenset({models[int(picks[k])]}),
            nodes=n,
            name=f"job-{k}",
        )
        jobs.append(GangJob(k, req, float(arrivals[k]), float(durations[k])))
    return jobs


def trace_pods(jobs: Sequence[GangJob], spot_share: float = 0.0, seed: int = 0, spot_qos: str = "BE") -> list[TracePod]:
    """``jobs`` as trace rows for ``sim.replay.Replay``: arrival and end in whole
    seconds (a trace's resolution; at least 1 s of run), each job spot (QoS
    ``spot_qos``, what ``ReplayConfig.spot_qos`` replays as spot) with probability
    ``spot_share``, drawn with ``seed``, the others on-demand (QoS "LS")."""
    spot = np.random.default_rng(seed).random(len(jobs)) < spot_share
    pods = []
    for job, is_spot in zip(jobs, spot, strict=True):
        start = round(job.arrival)
        pods.append(TracePod(job.request, start, start + max(1, round(job.duration)), spot_qos if is_spot else "LS"))
    return pods


@dataclass
class GangRun:
    """What one replay arm measured."""

    topology_aware: bool
    policy: str
    seed: int
    jobs: int = 0
    rejected: int = 0
    gangs: int = 0  # multi-node jobs placed
    gangs_rejected: int = 0
    gangs_one_leaf: int = 0
    gang_leaves: int = 0  # sum of leaves spanned over placed gangs
    multi_gpu_jobs: int = 0  # single-node jobs of 2+ GPUs placed
    multi_gpu_one_island: int = 0
    gpu_seconds: float = 0.0  # GPU-seconds held by placed jobs (within the run)
    capacity_seconds: float = 0.0
    by_size: dict[int, list[int]] = field(default_factory=dict)  # gang nodes -> [placed, one leaf]
    wall_seconds: float = 0.0

    @property
    def one_leaf_share(self) -> float:
        return self.gangs_one_leaf / self.gangs if self.gangs else 0.0

    @property
    def mean_leaves(self) -> float:
        return self.gang_leaves / self.gangs if self.gangs else 0.0

    @property
    def one_island_share(self) -> float:
        return self.multi_gpu_one_island / self.multi_gpu_jobs if self.multi_gpu_jobs else 0.0

    @property
    def utilisation(self) -> float:
        return self.gpu_seconds / self.capacity_seconds if self.capacity_seconds else 0.0


def replay(
    nodes: Sequence[Node],
    jobs: Sequence[GangJob],
    policy: str = "best_fit",
    topology_aware: bool = True,
    seed: int = 0,
) -> GangRun:
    """Replay ``jobs`` (sorted by arrival) on a fresh cluster of ``nodes``."""
    start = time.perf_counter()
    state = ClusterState(nodes)
    target = TargetWorkload.from_requests([member_of(j.request) for j in jobs])
    inner = make_policy(policy, target, seed)
    scheduler = Scheduler(IslandAware(inner) if topology_aware else inner, state, seed=seed)
    topo = Topology.of(state.nodes)
    run = GangRun(topology_aware, policy, seed)
    departures: list[tuple[float, int, int]] = []
    end = jobs[-1].arrival if jobs else 0.0
    for job in jobs:
        while departures and departures[0][0] <= job.arrival:
            _, key, n = heapq.heappop(departures)
            unplace_gang(scheduler, key, n)
        run.jobs += 1
        req = job.request
        plan = place_gang(scheduler, req, job.key, topology_aware=topology_aware)
        if req.nodes > 1:
            run.gangs_rejected += plan is None
        if plan is None:
            run.rejected += 1
            continue
        heapq.heappush(departures, (job.arrival + job.duration, job.key, req.nodes))
        run.gpu_seconds += req.gpu_count * req.nodes * (min(job.arrival + job.duration, end) - job.arrival)
        if req.nodes > 1:
            leaves = len({topo.leaf_name(state, a.node) for a in plan.allocations})
            run.gangs += 1
            run.gang_leaves += leaves
            run.gangs_one_leaf += leaves == 1
            size = run.by_size.setdefault(req.nodes, [0, 0])
            size[0] += 1
            size[1] += leaves == 1
        elif req.gpu_count >= 2:
            alloc = plan.allocations[0]
            run.multi_gpu_jobs += 1
            run.multi_gpu_one_island += in_one_island(state.nodes[state.index[alloc.node]], alloc.gpu_indices)
    run.capacity_seconds = float(state.gpu_count.sum()) * (end - (jobs[0].arrival if jobs else 0.0))
    run.wall_seconds = time.perf_counter() - start
    return run
