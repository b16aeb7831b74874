"""Prometheus metrics: request counts and latencies, plus cluster gauges read
from the database at scrape time (so they are right on every server replica).

Each app gets its own registry, so several apps in one test process do not clash.
With several API worker processes (``suanli server --workers N``) the supervisor sets
``PROMETHEUS_MULTIPROC_DIR`` and a scrape, whichever worker answers it, sums every
worker's request counts and latencies (prometheus-client's multiprocess mode); the
control loop's counters come from the database (``control.loop_report``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

from fastapi import FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from sqlalchemy import func, select
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from suanli.api.context import ServerContext
from suanli.api.deps import authenticated, bearer, source
from suanli.control import metrics as usage_metrics
from suanli.control.loop_report import Counters as LoopCounters
from suanli.db.models import Gpu, Instance, Job, Node, Tenant
from suanli.db.session import Database

#: Labels of each workload series: its kind (``instance``, ``job``), id and tenant.
WORKLOAD_LABELS = ["workload_kind", "workload_id", "tenant"]
#: DCGM-exporter's labels of a GPU series (``gpu`` index, ``UUID``, ``device``, ``modelName``,
#: ``Hostname``: the node), then the workload's.
GPU_LABELS = ["gpu", "UUID", "device", "modelName", "Hostname", *WORKLOAD_LABELS]


def workload_families(db: Database) -> list[GaugeMetricFamily]:
    """Each running workload's latest sample (``control.metrics``): CPU, memory and open
    sessions as ``suanli_workload_*``; GPUs under DCGM-exporter's names and units
    (``DCGM_FI_DEV_GPU_UTIL`` %, ``DCGM_FI_DEV_FB_USED`` MiB, ``DCGM_FI_DEV_POWER_USAGE`` W),
    one series per GPU the workload holds. A GPU not measured (virtual) has no DCGM series:
    ``suanli_workload_gpu_not_measured`` says so, with the reason."""
    cpu = GaugeMetricFamily("suanli_workload_cpu_percent", "CPU used, percent of one core", labels=WORKLOAD_LABELS)
    mem = GaugeMetricFamily("suanli_workload_memory_mib", "Memory in use, MiB", labels=WORKLOAD_LABELS)
    sessions = GaugeMetricFamily(
        "suanli_workload_sessions", "Open SSH or port-proxy connections into the workload", labels=WORKLOAD_LABELS
    )
    unmeasured = GaugeMetricFamily(
        "suanli_workload_gpu_not_measured",
        "1: the workload's GPUs are not measured (virtual GPUs, no NVML)",
        labels=[*WORKLOAD_LABELS, "reason"],
    )
    util = GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels=GPU_LABELS)
    fb = GaugeMetricFamily("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", labels=GPU_LABELS)
    power = GaugeMetricFamily("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", labels=GPU_LABELS)
    with db.sessions() as s:
        keys = [("instance", i) for i in s.scalars(select(Instance.id).where(Instance.state == "running"))]
        keys += [("job", i) for i in s.scalars(select(Job.id).where(Job.state == "running"))]
        tenants = dict(s.execute(select(Tenant.id, Tenant.name)).all())
    for (kind, wid), m in sorted(usage_metrics.latest(db, keys).items()):
        labels = [kind, str(wid), tenants.get(m.tenant_id, str(m.tenant_id))]
        cpu.add_metric(labels, m.cpu_percent)
        mem.add_metric(labels, m.memory_mib)
        if m.sessions is not None:
            sessions.add_metric(labels, m.sessions)
        if m.gpu_note:
            unmeasured.add_metric([*labels, m.gpu_note], 1)
        for g in m.gpus or []:
            gl = [
                str(g.get("index")),
                str(g.get("uuid", "")),
                f"nvidia{g.get('index')}",
                str(g.get("model", "")),
                str(g.get("node", "")),
                *labels,
            ]
            for fam, field in ((util, "util_percent"), (fb, "memory_used_mib"), (power, "power_w")):
                if g.get(field) is not None:
                    fam.add_metric(gl, float(g[field]))
    return [cpu, mem, sessions, unmeasured, util, fb, power]


class ClusterCollector:
    def __init__(self, db: Database, loop_stats: Callable[[], LoopCounters | None] | None = None) -> None:
        self.db = db
        self.loop_stats = loop_stats  #: callable returning ``loop_report.Counters``, or None

    def collect(self) -> Iterator[Metric]:
        total = GaugeMetricFamily("suanli_gpu_milli_total", "GPU capacity in milli-GPU", labels=["model", "virtual"])
        used = GaugeMetricFamily("suanli_gpu_milli_used", "Allocated milli-GPU", labels=["model", "virtual"])
        inst = GaugeMetricFamily("suanli_instances", "Instances by state", labels=["state"])
        jobs = GaugeMetricFamily("suanli_jobs", "Jobs by state", labels=["state"])
        try:
            with self.db.sessions() as s:
                q = (
                    select(Node.gpu_model, Gpu.virtual, func.count(), func.sum(Gpu.used_milli))
                    .join(Node, Node.id == Gpu.node_id)
                    .group_by(Node.gpu_model, Gpu.virtual)
                )
                for model, virtual, n, u in s.execute(q):
                    total.add_metric([model, str(bool(virtual)).lower()], n * 1000)
                    used.add_metric([model, str(bool(virtual)).lower()], int(u or 0))
                for state, n in s.execute(select(Instance.state, func.count()).group_by(Instance.state)):
                    inst.add_metric([state], n)
                for state, n in s.execute(select(Job.state, func.count()).group_by(Job.state)):
                    jobs.add_metric([state], n)
        except Exception:  # a scrape must not fail because the database hiccups
            pass
        yield from (total, used, inst, jobs)
        try:
            yield from workload_families(self.db)
        except Exception:
            pass
        try:
            stats = self.loop_stats() if self.loop_stats else None
        except Exception:
            stats = None
        if stats is not None:
            for name, doc, value in (
                ("suanli_control_ticks", "Control loop ticks since start", stats.ticks),
                ("suanli_control_launched", "Workloads launched since start", stats.launched),
                ("suanli_control_conflicts", "Allocation conflicts (stale snapshots) since start", stats.conflicts),
                ("suanli_control_policy_errors", "Placements the policy failed on (done by the fallback)", stats.policy_errors),
                ("suanli_control_last_tick_seconds", "Duration of the last control loop tick", stats.last_tick_s),
                ("suanli_control_waiting", "Work the last pass could not place", stats.waiting),
                (
                    "suanli_control_notices",
                    "Notices given since start (spot reclaim, outbid, funds, idle stop, migration)",
                    stats.notices,
                ),
                ("suanli_control_reclaimed", "Workloads evicted when their notice ran out, since start", stats.reclaimed),
                (
                    "suanli_control_migrations",
                    "GPU shares noticed to move for waiting whole-GPU work, since start",
                    stats.migrations,
                ),
                ("suanli_control_failed_over", "Workloads requeued from a down node, since start", stats.failed_over),
            ):
                g = GaugeMetricFamily(name, doc)
                g.add_metric([], value)
                yield g


class _Measure:
    """Pure ASGI middleware (cheaper than ``BaseHTTPMiddleware``): count and time
    each request by route template, so ``/v1/jobs/{job_id}`` is one series."""

    def __init__(self, app: ASGIApp, requests: Counter, latency: Histogram) -> None:
        self.app, self.requests, self.latency = app, requests, latency

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", "unmatched")
            self.requests.labels(scope["method"], path, str(status["code"])).inc()
            self.latency.labels(scope["method"], path).observe(time.perf_counter() - t0)


LOOPBACK = ("127.0.0.1", "::1", "localhost")


def install(app: FastAPI, ctx: ServerContext, loop_stats: Callable[[], LoopCounters | None] | None = None) -> CollectorRegistry:
    """``/metrics``: open to scrapers on this machine (loopback); from anywhere else it
    takes an operator's bearer token (Prometheus' ``authorization`` setting). The endpoint
    is one function for every app, reading what it serves from ``app.state``, as
    ``api.health`` explains."""
    registry = CollectorRegistry()
    requests = Counter("suanli_http_requests", "HTTP requests", ["method", "route", "status"], registry=registry)
    latency = Histogram("suanli_http_request_seconds", "HTTP request latency", ["method", "route"], registry=registry)
    scraped = registry
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # several worker processes: every one's counts
        scraped = CollectorRegistry()
        multiprocess.MultiProcessCollector(scraped)
    scraped.register(ClusterCollector(ctx.db, loop_stats))
    app.state.metrics_scraped = scraped
    app.add_middleware(_Measure, requests=requests, latency=latency)
    app.add_api_route("/metrics", metrics, methods=["GET"], include_in_schema=False)
    return registry


def metrics(request: Request) -> Response:
    if bearer(request) is not None or source(request) not in LOOPBACK:
        authenticated(request, request.app.state.ctx).require("admin", "operator")
    return Response(generate_latest(request.app.state.metrics_scraped), media_type=CONTENT_TYPE_LATEST)
