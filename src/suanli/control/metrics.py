"""Workload metrics: collected while work runs, stored as time series, downsampled, pruned.

Every ``interval_s`` (default 15 s) the collector asks each backend that declares
``ReportsUsage`` for the running tasks' usage, in one batched read per backend (the
local backend: one ``podman stats`` call), with no transaction open; then writes one raw
row per workload (a job's nodes summed: CPU and memory, GPU memory and power; GPU
utilisation averaged) in one transaction. Backends without the capability (Slurm) are
not sampled: their work has no metrics rather than invented ones.

Retention (``rollup``, every collection): raw rows older than ``raw_keep_s`` (an hour)
become five-minute buckets (averages; ``samples`` says how many), and buckets older than
``retention_days`` are deleted. The history endpoint returns both resolutions in time
order, so a dashboard draws the last hour in detail and the rest in buckets.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import delete, func, select

from suanli.backends.base import Backend, BackendError, Handle, ReportsUsage, UsageSample
from suanli.control import workloads
from suanli.db.models import WorkloadMetric
from suanli.db.session import Database

log = logging.getLogger(__name__)

Key = tuple[str, int]


@dataclass
class MetricsSettings:
    interval_s: float = 15.0  #: between collections (``--metrics-interval``)
    raw_keep_s: float = 3600.0  #: raw samples older than this become buckets
    bucket_s: int = 300  #: the downsampled resolution
    retention_days: float = 30.0  #: buckets older than this are deleted (``--metrics-retention-days``)

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.raw_keep_s <= 0 or self.bucket_s <= 0 or self.retention_days <= 0:
            raise ValueError("metrics interval, raw keep, bucket and retention must be > 0")


@dataclass(frozen=True)
class WorkloadUsage:
    """One workload's sample: its tasks' samples combined."""

    kind: str
    workload_id: int
    tenant_id: int
    ts: float
    cpu_percent: float
    memory_mib: float
    gpu_util_percent: float | None
    gpu_memory_mib: float | None
    power_w: float | None
    sessions: int | None
    gpu_note: str
    gpus: list[dict] = field(default_factory=list)
    #: False when a task's CPU is its first reading (its average since start): no sign of activity now
    cpu_over_interval: bool = True


def combine(kind: str, wid: int, tenant_id: int, ts: float, parts: Sequence[UsageSample]) -> WorkloadUsage:
    """A job's nodes summed (CPU, memory, GPU memory, power, sessions), GPU utilisation
    averaged over its GPUs; a GPU figure is None unless some task measured it."""
    utils = [g.util_percent for p in parts for g in p.gpus if g.util_percent is not None]
    if not utils:
        utils = [p.gpu_util_percent for p in parts if p.gpu_util_percent is not None]
    mems = [p.gpu_memory_mib for p in parts if p.gpu_memory_mib is not None]
    powers = [p.power_w for p in parts if p.power_w is not None]
    sessions = [p.sessions for p in parts if p.sessions is not None]
    return WorkloadUsage(
        kind,
        wid,
        tenant_id,
        ts,
        round(sum(p.cpu_percent for p in parts), 2),
        round(sum(p.memory_mib for p in parts), 2),
        round(sum(utils) / len(utils), 2) if utils else None,
        round(sum(mems), 2) if mems else None,
        round(sum(powers), 2) if powers else None,
        sum(sessions) if sessions else None,
        next((p.gpu_note for p in parts if p.gpu_note), ""),
        [
            {
                "node": p.node,
                "index": g.index,
                "uuid": g.uuid,
                "model": g.model,
                "util_percent": g.util_percent,
                "memory_used_mib": g.memory_used_mib,
                "power_w": g.power_w,
                "scope": g.scope,
            }
            for p in parts
            for g in p.gpus
        ],
        all(p.cpu_over_interval for p in parts),
    )


def sample_running(db: Database, backends: dict[str, Backend], now: float) -> list[WorkloadUsage]:
    """Read every running workload's usage (no transaction open during the reads)."""
    owners: dict[str, Key] = {}
    tenants: dict[Key, int] = {}
    by_backend: dict[str, list[Handle]] = defaultdict(list)
    with db.sessions() as s:
        for kind, row in workloads.running(s):
            tenants[(kind, row.id)] = row.tenant_id
            for raw in row.handles or []:
                h = Handle.from_json(raw)
                owners[h.key] = (kind, row.id)
                by_backend[h.backend].append(h)
    parts: dict[Key, list[UsageSample]] = defaultdict(list)
    for name, handles in by_backend.items():
        backend = backends.get(name)
        if not isinstance(backend, ReportsUsage):
            continue
        try:
            got = backend.usage(handles)
        except BackendError as exc:
            log.warning("metrics: the %s backend could not be read: %s", name, exc)
            continue
        for smp in got:
            if smp.key in owners:
                parts[owners[smp.key]].append(smp)
    return [combine(k, w, tenants[(k, w)], now, p) for (k, w), p in parts.items()]


def store(db: Database, samples: Sequence[WorkloadUsage]) -> None:
    if not samples:
        return
    with db.transaction() as s:
        s.add_all(
            WorkloadMetric(
                kind=u.kind,
                workload_id=u.workload_id,
                tenant_id=u.tenant_id,
                ts=u.ts,
                resolution_s=0,
                samples=1,
                cpu_percent=u.cpu_percent,
                memory_mib=u.memory_mib,
                gpu_util_percent=u.gpu_util_percent,
                gpu_memory_mib=u.gpu_memory_mib,
                power_w=u.power_w,
                sessions=u.sessions,
                gpu_note=u.gpu_note,
                gpus=u.gpus,
            )
            for u in samples
        )


def _mean(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return round(sum(got) / len(got), 2) if got else None


def rollup(db: Database, settings: MetricsSettings, now: float) -> tuple[int, int]:
    """Raw rows of whole buckets older than ``raw_keep_s`` into buckets; buckets past the
    retention deleted. Returns (raw rows folded, rows deleted by retention). Idempotent:
    a bucket is made only from raw rows that are deleted in the same transaction."""
    b = settings.bucket_s
    cutoff = (now - settings.raw_keep_s) // b * b
    with db.transaction() as s:
        raw = list(s.scalars(select(WorkloadMetric).where(WorkloadMetric.resolution_s == 0, WorkloadMetric.ts < cutoff)))
        groups: dict[tuple[str, int, int, float], list[WorkloadMetric]] = defaultdict(list)
        for r in raw:
            groups[(r.kind, r.workload_id, r.tenant_id, r.ts // b * b)].append(r)
        for (kind, wid, tenant, start), rows in groups.items():
            sessions = [r.sessions for r in rows if r.sessions is not None]
            s.add(
                WorkloadMetric(
                    kind=kind,
                    workload_id=wid,
                    tenant_id=tenant,
                    ts=start,
                    resolution_s=b,
                    samples=len(rows),
                    cpu_percent=_mean([r.cpu_percent for r in rows]) or 0.0,
                    memory_mib=_mean([r.memory_mib for r in rows]) or 0.0,
                    gpu_util_percent=_mean([r.gpu_util_percent for r in rows]),
                    gpu_memory_mib=_mean([r.gpu_memory_mib for r in rows]),
                    power_w=_mean([r.power_w for r in rows]),
                    sessions=max(sessions) if sessions else None,
                    gpu_note=next((r.gpu_note for r in rows if r.gpu_note), ""),
                    gpus=[],
                )
            )
        if raw:
            s.execute(delete(WorkloadMetric).where(WorkloadMetric.resolution_s == 0, WorkloadMetric.ts < cutoff))
        gone = s.execute(delete(WorkloadMetric).where(WorkloadMetric.ts < now - settings.retention_days * 86400)).rowcount  # type: ignore[attr-defined]
    return len(raw), int(gone or 0)


def latest(db: Database, keys: Sequence[Key]) -> dict[Key, WorkloadMetric]:
    """The newest raw sample of each workload that has one."""
    out: dict[Key, WorkloadMetric] = {}
    by_kind: dict[str, list[int]] = defaultdict(list)
    for kind, wid in keys:
        by_kind[kind].append(wid)
    with db.reads() as s:
        for kind, ids in by_kind.items():
            newest = (
                select(func.max(WorkloadMetric.id))
                .where(WorkloadMetric.kind == kind, WorkloadMetric.workload_id.in_(ids), WorkloadMetric.resolution_s == 0)
                .group_by(WorkloadMetric.workload_id)
            )
            for row in s.scalars(select(WorkloadMetric).where(WorkloadMetric.id.in_(newest))):
                out[(kind, row.workload_id)] = row
    return out


def history(db: Database, kind: str, wid: int, since: float, limit: int = 5000) -> list[WorkloadMetric]:
    """Samples and buckets from ``since`` on, oldest first (at most ``limit``: the newest)."""
    with db.sessions() as s:
        rows = list(
            s.scalars(
                select(WorkloadMetric)
                .where(WorkloadMetric.kind == kind, WorkloadMetric.workload_id == wid, WorkloadMetric.ts >= since)
                .order_by(WorkloadMetric.ts.desc(), WorkloadMetric.id.desc())
                .limit(limit)
            )
        )
    return rows[::-1]


class Collector:
    """The metrics thread (``api.background``): collect, store, then the ``after`` hooks
    (idle auto-stop reads the samples), then retention."""

    def __init__(
        self,
        db: Database,
        backends: dict[str, Backend],
        settings: MetricsSettings | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.backends = backends
        self.settings = settings or MetricsSettings()
        self.now = now
        #: called with each collection's samples, in order (``control.autostop``)
        self.after: list[Callable[[list[WorkloadUsage], float], object]] = []
        self.collections = 0
        self.cpu_s = 0.0  #: this thread's CPU time spent collecting (the bench reads it)
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def collect_once(self) -> list[WorkloadUsage]:
        t0 = time.thread_time()
        now = self.now()
        got = sample_running(self.db, self.backends, now)
        store(self.db, got)
        for hook in self.after:
            try:
                hook(got, now)
            except Exception:
                log.exception("metrics: %s failed", getattr(hook, "__name__", hook))
        rollup(self.db, self.settings, now)
        self.collections += 1
        self.cpu_s += time.thread_time() - t0
        return got

    def _run(self) -> None:
        while not self._halt.is_set():
            try:
                self.collect_once()
            except Exception:
                log.exception("metrics collection failed (retried in %.0f s)", self.settings.interval_s)
            self._halt.wait(self.settings.interval_s)

    def start(self) -> None:
        if self._thread is None:
            self._halt.clear()
            self._thread = threading.Thread(target=self._run, name="suanli-metrics", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
