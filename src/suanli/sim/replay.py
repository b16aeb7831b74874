"""Time-based replay of a trace through the scheduler: arrivals, departures,
queueing, spot preemption with notice, node faults and checkpoint recovery.

A discrete-event simulation (events ordered by time, then kind, then sequence, as
SimPy does). The replay's time is a ``suanli.clock.ManualClock`` set to each
instant's event time. After the events of one instant are applied, one scheduling
pass serves the pending queue: place what fits (``Scheduler.place``, or the gang
planner ``gang.plan_gang`` for a request of several nodes: the code the live
platform runs); for a higher-class request that does not fit, ask the reclaim
planner (``scheduler.reclaim.plan_reclaim``, the live platform's too) for spot
victims, send them a notice, and evict them when it expires. Evicted and fault-hit
work resumes from its last checkpoint.

A gang (``Request.nodes`` > 1, e.g. ``gang_workload.trace_pods``) runs all its
members or none: it starts when every member fits, gets victims on every node it
lacks or none, and one member evicted (a notice or a fault) stops the whole gang.

Job lifecycle: pending -> running -> (noticed ->) finished | requeued -> pending;
a fault without checkpoints fails the job.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from suanli.clock import ManualClock
from suanli.scheduler import ClusterState, Node, PriorityClass, Request, Scheduler, TargetWorkload, make_policy
from suanli.scheduler.defrag import MovableSet, apply_plan
from suanli.scheduler.gang import member_keys, plan_gang, reserve_all, unplace_gang
from suanli.scheduler.gang_moves import net_moves, plan_gang_moves
from suanli.scheduler.model import Allocation
from suanli.scheduler.policy import request_shape
from suanli.scheduler.preemption import Candidate
from suanli.scheduler.queue import PendingQueue
from suanli.scheduler.reclaim import Claim, plan_reclaim, unclaimed
from suanli.scheduler.repack import PLANNERS
from suanli.sim.events import EventKind, EventQueue
from suanli.sim.load import busy_period, scale_arrivals
from suanli.sim.traces import TracePod


@dataclass(frozen=True)
class ReplayConfig:
    policy: str = "suanli"
    load: float | None = None  # rescale arrivals to this offered load; None: raw times
    spot_qos: str = "BE"  # trace QoS that becomes spot work
    checkpoint_interval: float = 0.0  # seconds; 0: no checkpoints
    node_mtbf: float = 0.0  # seconds; 0: no faults
    node_mttr: float = 1800.0  # seconds a failed node stays down
    notice: float = 300.0  # spot reclaim notice, seconds
    preemption: str = "least_lost_work"  # or "lowest_priority_first", or "none"
    queue: str = "priority"  # "priority" (with backfill) or "fifo" (strict, no backfill)
    seed: int = 42
    #: Migration of running shares for a whole-GPU request that does not fit: the
    #: planner ("direct" or "repack", ``repack.PLANNERS``), at most this many moves
    #: per plan (0: off), and the downtime of one move (checkpoint, stop, start
    #: elsewhere), added to the moved job's remaining time.
    migration_planner: str = "direct"
    migration_moves: int = 0
    migration_downtime: float = 60.0
    migration_interval: float = 300.0  # seconds between two plans sought for one request shape


@dataclass
class Job:
    key: int
    request: Request
    arrival: float
    duration: float
    remaining: float
    run: int = 0  # bumped on every start, so stale finish/notice events are ignored
    started: float | None = None
    first_start: float | None = None
    allocs: tuple[Allocation, ...] = ()  # one per member while running, else empty
    noticed: bool = False
    waiting_until: float = -math.inf  # notice given to victims for this job expires then
    faulted: bool = False
    done: bool = False
    failed: bool = False

    @property
    def alloc(self) -> Allocation | None:
        """The (first member's) allocation while running, else None."""
        return self.allocs[0] if self.allocs else None

    @property
    def start_time(self) -> float:
        """When the running job last started (asking a job that is not running is a bug)."""
        if self.started is None:
            raise ValueError(f"job {self.key} is not running")
        return self.started

    @property
    def gpu_milli(self) -> int:
        """GPU milli held while running, over all members."""
        return self.request.total_gpu_milli * self.request.nodes


def _job_of(key: tuple[int, int]) -> int:
    """A spot candidate ``(job key, member)`` belongs to the job."""
    return key[0]


@dataclass
class ReplayResult:
    config: ReplayConfig
    jobs: list[Job]
    allocation: list[tuple[float, float]]  # (time, allocated % of GPU capacity)
    avg_gpu_allocation: float
    preemptions: int
    lost_gpu_seconds: dict[str, float]
    node_failures: int
    wall_seconds: float
    busy: tuple[float, float] = (0.0, 0.0)
    fault_losses: list[float] = field(default_factory=list)  # unsaved seconds per fault eviction
    migrations: int = 0
    migration_plans: int = 0  # jobs started thanks to migrations
    interrupted_gpu_seconds: float = 0.0  # GPU time the moved shares spent stopped


class Replay:
    def __init__(
        self, nodes: Sequence[Node], pods: Sequence[TracePod], config: ReplayConfig, clock: ManualClock | None = None
    ) -> None:
        """``clock``: the replay sets it to each event's time (default: a fresh one)."""
        self.cfg = config
        self.state = ClusterState(nodes)
        requests = [self._request(p) for p in pods]
        self.scheduler = Scheduler(
            make_policy(config.policy, TargetWorkload.from_requests(requests), config.seed), self.state, config.seed
        )
        arrivals = np.array([p.creation_time or 0 for p in pods], dtype=np.float64)
        durations = np.array([max(1, (p.deletion_time or 0) - (p.creation_time or 0)) for p in pods], dtype=np.float64)
        if config.load is not None:
            gpus = np.array([r.total_gpu_milli * r.nodes for r in requests], dtype=np.float64) / 1000
            arrivals = scale_arrivals(arrivals, durations, gpus, config.load, self.state.total_gpu_milli / 1000)
        self.jobs = [Job(k, r, float(a), float(d), float(d)) for k, (r, a, d) in enumerate(zip(requests, arrivals, durations))]
        self.events = EventQueue()
        for job in self.jobs:
            self.events.push(job.arrival, EventKind.ARRIVAL, job.key)
        self.queue = PendingQueue()
        self.on_node: dict[str, set[int]] = defaultdict(set)
        self.rng = np.random.default_rng(config.seed)
        self.busy = busy_period(arrivals) if len(arrivals) else (0.0, 0.0)
        self.start_time = float(arrivals.min()) if len(arrivals) else 0.0
        self.clock = clock if clock is not None else ManualClock(self.start_time)
        if config.node_mtbf > 0:
            for node in nodes:
                self.events.push(self.start_time + self.rng.exponential(config.node_mtbf), EventKind.NODE_FAIL, node.name)
        self.preemptions = self.node_failures = 0
        self.lost = {"preemption": 0.0, "faults": 0.0}
        self.fault_losses: list[float] = []
        self.capacity_freed = True
        self.new_arrivals: list[int] = []
        self.movable = MovableSet(self.state) if config.migration_moves > 0 else None
        self.migrations = self.migration_plans = 0
        self.last_migration_try: dict[tuple, float] = {}
        self.interrupted = 0.0

    @property
    def now(self) -> float:
        """The replay's current time (its clock's)."""
        return self.clock.now()

    def inject_fault(self, node: str, at: float) -> None:
        """Fail ``node`` at time ``at`` (it recovers after ``node_mttr``): scripted faults
        for scenarios and tests, on top of any random ones."""
        if node not in self.state.index:
            raise ValueError(f"unknown node {node!r}")
        self.events.push(at, EventKind.NODE_FAIL, node)

    def _request(self, pod: TracePod) -> Request:
        r = pod.request
        if pod.qos == self.cfg.spot_qos:
            return Request(r.cpu_milli, r.memory_mib, r.gpu_count, r.gpu_milli, r.gpu_models, PriorityClass.SPOT, r.nodes, r.name)
        return r

    # -- job transitions ---------------------------------------------------------------
    def _start(self, job: Job, allocs: Sequence[Allocation], now: float) -> None:
        if job.request.nodes == 1:
            self.scheduler.reserve(job.key, allocs[0])
        elif not reserve_all(self.scheduler, member_keys(job.key, job.request.nodes), allocs):
            raise RuntimeError(f"gang {job.key}: its plan no longer fits")  # planned on this very state
        job.allocs, job.started, job.run, job.noticed = tuple(allocs), now, job.run + 1, False
        if job.first_start is None:
            job.first_start = now
        for alloc in allocs:
            self.on_node[alloc.node].add(job.key)
        self.events.push(now + job.remaining, EventKind.FINISH, (job.key, job.run))
        if self.movable is not None and job.request.nodes == 1 and job.request.is_sharing:
            self.movable.add(job.key, allocs[0], job.request.gpu_models)

    def _job(self, key: Hashable) -> Job:
        """The job of a scheduler key (the replay's keys are indexes into ``jobs``)."""
        if not isinstance(key, int):
            raise TypeError(f"not a replay job key: {key!r}")
        return self.jobs[key]

    def _stop(self, job: Job) -> None:
        if self.movable is not None:
            self.movable.discard(job.key)
        if job.request.nodes == 1:
            self.scheduler.unreserve(job.key)
        else:
            unplace_gang(self.scheduler, job.key, job.request.nodes)
        for alloc in job.allocs:
            self.on_node[alloc.node].discard(job.key)
        job.allocs, job.started = (), None
        self.capacity_freed = True

    def _evict(self, job: Job, now: float, cause: str) -> None:
        """Stop ``job`` mid-run; keep the progress up to its last checkpoint."""
        ran = now - job.start_time
        interval = self.cfg.checkpoint_interval
        saved = math.floor(ran / interval) * interval if interval > 0 else 0.0
        self.lost[cause] += (ran - saved) * job.gpu_milli / 1000
        if cause == "faults":
            self.fault_losses.append(ran - saved)
        job.remaining -= saved
        self._stop(job)
        if cause == "faults":
            job.faulted = True
            if interval <= 0:
                job.failed = True  # nothing to resume from
                return
        self.queue.push(job.key, job.request, job.arrival)

    def _running_spot(self) -> list[Candidate]:
        """Spot work that may be reclaimed, one candidate ``(job key, member)`` per
        allocation, each with the work it would lose: the unsaved progress at the
        moment the notice expires (it keeps running, and checkpointing, until then).
        Only what a live scheduler knows is used: start time and checkpoint interval,
        not how long the work has left to run. A gang member is valued at its own
        GPUs, as the live platform values each allocation."""
        at = self.now + self.cfg.notice
        interval = self.cfg.checkpoint_interval
        out: list[Candidate] = []
        for job in self.jobs:
            if not job.allocs or job.noticed or job.request.priority is not PriorityClass.SPOT:
                continue
            ran = at - job.start_time
            unsaved = ran % interval if interval > 0 else ran
            lost = unsaved * job.request.total_gpu_milli / 1000
            out.extend(
                Candidate((job.key, i), alloc, job.request.priority, lost, job.start_time) for i, alloc in enumerate(job.allocs)
            )
        return out

    def _place(self, req: Request) -> tuple[Allocation, ...] | None:
        """Where ``req`` goes now (every member of a gang), or None; changes nothing."""
        if req.nodes == 1:
            placement = self.scheduler.place(req)
            return (placement.allocation,) if placement.allocation is not None else None
        plan = plan_gang(self.state, self.scheduler.policy, req, self.scheduler.ranks)
        return plan.allocations if plan is not None else None

    def _migrate(self, req: Request, now: float) -> tuple[Allocation, ...] | None:
        """For a whole-GPU ``req`` (one node or a gang's several) that does not fit: plan
        migrations of running shares, apply them (each moved job is checkpointed, stopped
        and started on its new GPU, losing ``migration_downtime`` seconds), and return
        where ``req`` goes; None when no plan exists. Noticed (reclaimed) shares stay. A
        gang's plans (``gang_moves.plan_gang_moves``) move each share once, all together, as
        the live platform does (``control.migrate``)."""
        if self.movable is None or req.is_sharing or not req.gpu_count:
            return None
        movable, planner = self.movable, PLANNERS[self.cfg.migration_planner]
        noticed = [k for k in movable if self._job(k).noticed]
        for k in noticed:
            movable.discard(k)
        try:
            if req.nodes == 1:
                plan = planner(self.state, req, movable, self.cfg.migration_moves)
                plans = None if plan is None else [plan]
            else:
                trial = MovableSet(self.state)
                for k, alloc in movable.items():
                    trial.add(k, alloc, movable.models.get(k))
                plans = plan_gang_moves(planner, self.state, req, trial, self.cfg.migration_moves)
        finally:
            for k in noticed:
                movable.add(k, self._job(k).allocs[0], self._job(k).request.gpu_models)
        if plans is None:
            return None
        if req.nodes == 1:
            moves = list(plans[0].migrations)
            apply_plan(self.scheduler, plans[0], movable)
        else:
            moves = net_moves(plans)
            for m in moves:
                self.scheduler.unreserve(m.key)
            for m in moves:
                self.scheduler.reserve(m.key, m.new)
                movable.add(m.key, m.new)
        down = self.cfg.migration_downtime
        for m in moves:
            job = self._job(m.key)
            job.remaining -= now - job.start_time
            job.remaining += down
            self.on_node[m.old.node].discard(job.key)
            self.on_node[m.new.node].add(job.key)
            job.allocs, job.started, job.run = (m.new,), now, job.run + 1
            self.events.push(now + job.remaining, EventKind.FINISH, (job.key, job.run))
            self.interrupted += down * m.old.milli_per_gpu / 1000
        self.migrations += len(moves)
        self.migration_plans += 1
        return tuple(p.allocation for p in plans)

    # -- the scheduling pass -------------------------------------------------------------
    def _pass(self, now: float) -> None:
        if self.capacity_freed:
            candidates = self.queue.ordered()
        else:  # nothing was freed: only the newcomers can possibly fit
            candidates = (
                (k, self.jobs[k].request)
                for k in sorted(self.new_arrivals, key=lambda k: (-self.jobs[k].request.priority.rank, k))
            )
            if self.cfg.queue == "fifo" and len(self.queue) > len(self.new_arrivals):
                candidates = iter(())
        self.capacity_freed, self.new_arrivals = False, []
        failed: set[tuple] = set()
        spot_running: list[Candidate] | None = None
        for key, req in candidates:
            if key not in self.queue:
                continue
            shape = (*request_shape(req), req.memory_mib, req.nodes)
            if shape in failed:
                continue
            allocs = self._place(req)
            if allocs is None and self.movable is not None:
                if now - self.last_migration_try.get(shape, -math.inf) >= self.cfg.migration_interval:
                    self.last_migration_try[shape] = now
                    allocs = self._migrate(req, now)
            if allocs is not None:
                self.queue.remove(key)
                self._start(self._job(key), allocs, now)
                continue
            failed.add(shape)
            if self.cfg.queue == "fifo":
                break
            job = self._job(key)
            if self.cfg.preemption == "none" or req.priority is PriorityClass.SPOT or job.waiting_until > now:
                continue
            if spot_running is None:
                spot_running = self._running_spot()
            # One claim at a time, not the pass's failures in one batch: work placed
            # between two claims changes the state the next one is planned on.
            claim = Claim(key, req, req.nodes)
            plans = plan_reclaim(self.state, [claim], spot_running, self.scheduler.ranks, self.cfg.preemption, _job_of)
            for plan in plans:
                job.waiting_until = now + self.cfg.notice
                for vkey in plan.workloads:
                    vjob = self.jobs[vkey]
                    vjob.noticed = True
                    self.events.push(now + self.cfg.notice, EventKind.NOTICE_EXPIRED, (vjob.key, vjob.run))
            spot_running = unclaimed(spot_running, plans, _job_of)

    # -- the event loop ------------------------------------------------------------------
    def run(self, progress: Callable[[int, int], None] | None = None) -> ReplayResult:
        start = time.perf_counter()
        unfinished = len(self.jobs)
        series: list[tuple[float, float]] = []
        area, last_t = 0.0, self.start_time
        total = self.state.total_gpu_milli
        self.clock.set(self.start_time)
        handled = 0
        # Stop when no work event is left, unless queued work waits for a node's repair.
        while unfinished and (self.events.work_pending() or (len(self.queue) and self.events.pending[EventKind.NODE_RECOVER])):
            now = self.events.peek_time()
            self.clock.set(now)
            # time-weighted allocation over the busy period
            lo, hi = max(last_t, self.busy[0]), min(now, self.busy[1])
            if hi > lo:
                area += (hi - lo) * self.state.used_gpu_milli
            last_t = now
            for kind, payload in self.events.pop_instant():
                handled += 1
                unfinished -= self._apply(kind, payload, now)
            self._pass(now)
            series.append((now, 100.0 * self.state.used_gpu_milli / total))
            if progress is not None and handled % 2000 < 8:
                progress(len(self.jobs) - unfinished, len(self.jobs))
        span = self.busy[1] - self.busy[0]
        avg = 100.0 * area / (span * total) if span > 0 else series[0][1] if series else 0.0
        return ReplayResult(
            self.cfg,
            self.jobs,
            _thin([p for p in series if p[0] <= 2 * self.busy[1] - self.start_time]),
            avg,
            self.preemptions,
            dict(self.lost),
            self.node_failures,
            time.perf_counter() - start,
            self.busy,
            self.fault_losses,
            self.migrations,
            self.migration_plans,
            self.interrupted,
        )

    def _apply(self, kind: EventKind, payload, now: float) -> int:
        """Apply one event; return the number of jobs it ended (finished or failed)."""
        if kind is EventKind.ARRIVAL:
            job = self.jobs[payload]
            self.scheduler.observe(job.request)
            self.queue.push(job.key, job.request, job.arrival)
            self.new_arrivals.append(job.key)
        elif kind is EventKind.FINISH:
            key, run = payload
            job = self.jobs[key]
            if job.allocs and job.run == run:
                self._stop(job)
                job.done, job.remaining = True, 0.0
                return 1
        elif kind is EventKind.NOTICE_EXPIRED:
            key, run = payload
            job = self.jobs[key]
            if job.allocs and job.run == run and job.noticed:
                self.preemptions += 1
                self._evict(job, now, "preemption")
        elif kind is EventKind.NODE_FAIL:
            self.node_failures += 1
            self.state.set_schedulable(payload, False)
            ended = 0
            for key in list(self.on_node[payload]):
                job = self.jobs[key]
                self._evict(job, now, "faults")
                ended += job.failed
            self.events.push(now + self.cfg.node_mttr, EventKind.NODE_RECOVER, payload)
            return ended
        elif kind is EventKind.NODE_RECOVER:
            self.state.set_schedulable(payload, True)
            self.capacity_freed = True
            if self.cfg.node_mtbf > 0:
                self.events.push(now + self.rng.exponential(self.cfg.node_mtbf), EventKind.NODE_FAIL, payload)
        return 0


def _thin(series: list[tuple[float, float]], points: int = 400) -> list[tuple[float, float]]:
    if len(series) <= points:
        return series
    step = len(series) / points
    return [series[int(k * step)] for k in range(points)] + [series[-1]]


def summary(result: ReplayResult) -> dict:
    """The JSON object ``suanli sim replay --json`` prints."""
    delays: dict[str, list[float]] = defaultdict(list)
    for job in result.jobs:
        if job.first_start is not None:
            delays[job.request.priority.value].append(job.first_start - job.arrival)
    queue_delay = {
        cls: {"mean": float(np.mean(d)), "p50": float(np.percentile(d, 50)), "p99": float(np.percentile(d, 99)), "jobs": len(d)}
        for cls, d in sorted(delays.items())
    }
    cfg = result.config
    span_h = (result.allocation[-1][0] - result.allocation[0][0]) / 3600 if result.allocation else 0.0
    return {
        "policy": cfg.policy,
        "load": cfg.load,
        "seed": cfg.seed,
        "queue": cfg.queue,
        "preemption_strategy": cfg.preemption,
        "jobs": len(result.jobs),
        "jobs_finished": sum(j.done for j in result.jobs),
        "jobs_never_started": sum(j.first_start is None for j in result.jobs),
        "queue_delay_seconds": queue_delay,
        "busy_period_seconds": [round(result.busy[0], 1), round(result.busy[1], 1)],
        "avg_gpu_allocation": round(result.avg_gpu_allocation, 3),
        "gpu_allocation_over_time": [[round(t, 1), round(a, 3)] for t, a in result.allocation],
        "preemptions": result.preemptions,
        "lost_gpu_hours": {k: round(v / 3600, 3) for k, v in result.lost_gpu_seconds.items()},
        "node_failures": result.node_failures,
        "jobs_recovered": sum(j.faulted and j.done for j in result.jobs),
        "jobs_failed": sum(j.failed for j in result.jobs),
        "fault_evictions": len(result.fault_losses),
        "max_lost_seconds_per_fault": round(max(result.fault_losses, default=0.0), 3),
        "migrations": result.migrations,
        "migration_plans": result.migration_plans,
        "migrations_per_hour": round(result.migrations / span_h, 4) if span_h > 0 else 0.0,  # over the replayed span
        "gpu_hours_interrupted_by_migration": round(result.interrupted_gpu_seconds / 3600, 3),
        "wall_seconds": round(result.wall_seconds, 3),
    }
