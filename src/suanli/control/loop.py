"""The control loop: one background thread per server that owns every side effect.

A tick is one explicit recipe (Kueue's ``schedule()`` is the model), its phases in
this order, each in a module of its own:

1. **health** (``health``, ``heartbeat``): node state from the backends that report
   it and from agents' heartbeats, every ``health_interval_s``; then (1b, when
   there is work) the GPU indices backends chose for their running tasks;
2. **reconcile** (``reconcile``): the backends' view of running work: exits every
   ``poll_interval_s`` and at once when a backend says a task ended (``ReportsExits``),
   stop and cancel requests every tick; then (2b, when work ended or every
   ``poll_interval_s``) **verify runs** (``verify_jobs``): the report a node's
   verification job left is recorded;
3. **failover** (``failover``): work on a down node requeued from its checkpoint;
4. **notices** (``expiry``): work whose notice ran out evicted and requeued (spot
   victims, moved shares), or stopped and requeued (a tenant out of funds); first, a
   migration's notice withdrawn where its request no longer waits (``migrate``);
5. **outbid** (``outbid``): spot work bidding below the spot price noticed; then
   (5b, every ``poll_interval_s``) **funds** (``funds``): the running work of a
   prepaid tenant whose balance is spent noticed, a notice withdrawn after a top-up;
6. **pipelines** (``pipelines``): queued jobs whose dependency failed or was cancelled
   cancelled with its name, transitively (one small read when none did); then
   **admit** (``admission``): waiting work judged once against quotas, budgets and
   bids; what can never run fails, what may not run yet is held with its reason, and a
   migration's notice for a held request is withdrawn;
7. **preempt** (``preempt``): spot victims noticed for admitted higher-class work
   that does not fit; then (7b, when the operator turned it on) **migrate**
   (``migrate``): running shares noticed to move for whole-GPU work that the free
   capacity's fragmentation keeps waiting;
8. **schedule** (``scheduling``): admitted work placed and its allocations claimed;
9. **launch** (``launcher``): what was claimed started, several at once (a
   container start is mostly waiting on the engine; rows are independent). The loop's
   thread does not wait for them: the next tick may run while they do (a claimed row
   is no one else's to place, reconcile reads only rows with handles).

Phases 3-5 and 7 run only when a node is down, spot work runs or a notice is pending (small reads;
on SQLite every transaction takes the write lock). A failing phase among 1-5 and 7 is
logged and does not stop the others. On start the loop first repairs what a previous
(possibly killed) server left behind: adopt or fail its in-flight launches, stop tasks
nobody owns, recompute usage counters. API handlers call ``wake()`` so new work does
not wait for the next tick.

Where nothing waits, runs or is being launched, a tick is phase 1 and one small read,
and the loop then sleeps ``idle_wait_s`` (the health interval) instead of ``interval_s``
unless woken: on this platform's machines a pass after a quarter of a second asleep
costs two to ten times one with warm caches (``bench/server_costs.py``; BENCHMARKS.md,
issue 11, session 31), so an idle server's cost is mostly how often it wakes.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import cast

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from suanli.backends.base import Backend, ReportsExits
from suanli.clock import SYSTEM, Clock
from suanli.control import admission, funds, health, heartbeat, pipelines, reconcile, sizing, verify_jobs, workloads
from suanli.control.expiry import expire_notices
from suanli.control.failover import failover
from suanli.control.launcher import Plan, fail_launch, launch, plan, unclaim
from suanli.control.loop_report import Counters, Publisher
from suanli.control.migrate import Migrator, withdraw_needless
from suanli.control.notice import making_room
from suanli.control.outbid import outbid
from suanli.control.plane import MigrationSettings, Plane, ReclaimSettings
from suanli.control.preempt import preempt
from suanli.control.scheduling import PassMemo, PassResult, Waiting, schedule_pass, to_request, waiting_work
from suanli.control.secrets import Keyring
from suanli.control.waiting import Reason
from suanli.db.clock import utcnow
from suanli.db.models import Allocation, Instance, Job
from suanli.db.session import Database
from suanli.scheduler import make_policy
from suanli.scheduler.policies.suanli import LEARNED_MIX_REQUESTS

log = logging.getLogger(__name__)

#: Launches run at most this many at a time.
LAUNCH_WORKERS = 8
#: How many of the newest workloads a starting loop shows its policy (``learn_served_mix``):
#: what the default policy rehearses its scarce-model key on; one query per kind.
MIX_HISTORY = LEARNED_MIX_REQUESTS


@dataclass
class LoopStats:
    ticks: int = 0
    launched: int = 0
    conflicts: int = 0
    policy_errors: int = 0
    last_tick_s: float = 0.0
    #: why each waiting row the last pass saw waits (``control.waiting``)
    unplaced: dict[tuple[str, int], Reason] = field(default_factory=dict)
    #: (code, when it was first seen) per waiting row; carried over a restart (``loop_report``)
    since: dict[tuple[str, int], tuple[str, datetime]] = field(default_factory=dict)

    def since_for(self, unplaced: dict[tuple[str, int], Reason], now: datetime) -> dict[tuple[str, int], tuple[str, datetime]]:
        """A pass's ``since``: kept for rows that wait for the same code, ``now`` for the rest."""
        old = self.since
        return {k: (r.code, old[k][1] if k in old and old[k][0] == r.code else now) for k, r in unplaced.items()}

    def waiting(self, key: tuple[str, int]) -> tuple[Reason, datetime | None] | None:
        r = self.unplaced.get(key)
        if r is None:
            return None
        seen = self.since.get(key)
        return r, (seen[1] if seen and seen[0] == r.code else None)


class ControlLoop:
    def __init__(
        self,
        db: Database,
        backends: dict[str, Backend],
        data_dir: Path,
        policy: str = "suanli",
        interval_s: float = 0.5,
        stop_grace_s: float = 10.0,
        poll_interval_s: float | None = None,
        *,
        reclaim: ReclaimSettings | None = None,
        migration: MigrationSettings | None = None,
        health_interval_s: float = 1.0,
        heartbeat_timeout_s: float | None = heartbeat.DEFAULT_TIMEOUT_S,
        clock: Clock = SYSTEM,
        keyring: Keyring | None = None,
    ) -> None:
        """``reclaim``: notice and grace of spot reclaim and failover (default: the
        stop grace and a five-minute notice); ``migration``: moving shares for waiting
        whole-GPU work (default: off); ``heartbeat_timeout_s``: silence after
        which a node with an agent is down (None: never); ``clock``: "now" for notices
        (``suanli.clock``); ``keyring``: what opens workloads' secrets at launch (default:
        the data directory's key file)."""
        self.db = db
        self.backends = backends
        self.data_dir = Path(data_dir)
        self.plane = Plane(
            db,
            backends,
            self.data_dir,
            reclaim or ReclaimSettings(grace_s=stop_grace_s),
            migration=migration or MigrationSettings(),
            clock=clock,
            keyring=keyring or Keyring.load(self.data_dir),
        )
        self.policy = make_policy(policy)
        #: places a request if ``policy`` raises on it (see ``schedule_pass``)
        self.fallback = make_policy("best_fit")
        self.interval_s = interval_s
        self.stop_grace_s = stop_grace_s
        #: how often every running task's status is asked of its backend (it costs
        #: O(running tasks)); stop and cancel requests are handled on every tick.
        self.poll_interval_s = 2 * interval_s if poll_interval_s is None else poll_interval_s
        self._last_poll = 0.0
        self.health_interval_s = health_interval_s
        #: how long the loop sleeps, unless woken, after a tick that found no work
        #: (``idle``): then only node health is due, every ``health_interval_s``
        self.idle_wait_s = max(interval_s, health_interval_s)
        self.idle = False
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self._last_health = -float("inf")
        self._memo = PassMemo()
        self.migrator = Migrator(self.plane)
        #: called when a tick ended work (exits, stops, evictions): the billing
        #: thread's wake, so usage does not wait for its next interval
        self.work_ended: Callable[[], None] = lambda: None
        #: identifies this process's claims; a fresh id per start, so claims of a
        #: killed predecessor are recognisably someone else's.
        self.owner = f"{uuid.uuid4().hex[:12]}"
        self.stats = LoopStats()
        #: writes the counters and the waiting reasons where API processes read them
        self.report = Publisher(db)
        #: the inventory the last admit phase judged waiting work against (``sizing.inventory_fingerprint``)
        self._inventory: tuple | None = None
        self._wake = threading.Event()
        #: set by backends that say when a task ends (``ReportsExits``): poll on the next tick
        self._exited = threading.Event()
        for backend in backends.values():
            if isinstance(backend, ReportsExits):
                backend.on_task_exit(self.task_exited)
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        #: runs launches, at most LAUNCH_WORKERS at a time (claimed rows, independent)
        self._launcher = ThreadPoolExecutor(max_workers=LAUNCH_WORKERS, thread_name_prefix="suanli-launch")
        self._inflight: set[Future[None]] = set()
        self._inflight_lock = threading.Lock()  # launch threads drop their futures as they end
        self._tick_lock = threading.Lock()

    @property
    def reclaim(self) -> ReclaimSettings:
        return self.plane.reclaim

    def recover(self) -> None:
        """Repair after a previous server: run once before the first tick. Work found
        ended (it exited or was killed while no server watched) wakes billing as a
        tick's ends do, so its usage is posted at the restart, not a billing interval
        later."""
        launches = reconcile.adopt_or_fail_launches(self.db, self.backends, self.owner)
        if reconcile.reconcile_running(self.db, self.backends, self.data_dir, self.stop_grace_s) or launches:
            self.work_ended()
        reconcile.sweep_orphans(self.db, self.backends)
        reconcile.repair_counters(self.db)
        self.learn_served_mix()

    def learn_served_mix(self) -> None:
        """Show the policy the ``MIX_HISTORY`` newest workloads that are not waiting, as
        if they had just arrived. The default policy learns the request mix it plans
        for from arrivals (``suanli_online``); without this every restart began from an
        empty mix, where every node ties and placement falls to the node order until
        enough new work has arrived. Work that waits now is seen by the first pass."""
        with self.db.transaction() as s:
            requests = [to_request(row) for row in workloads.served(s, MIX_HISTORY)]
        for req in requests:
            self.policy.observe(req)

    def tick(self, wait_launches: bool = True) -> PassResult:
        """One pass of the recipe in the module docstring. ``wait_launches``: return once
        this tick's launches are done (a test's step); the loop's own thread does not wait
        (``_run``): the next tick records exits and places work while they run, so a
        pipeline's next job does not wait behind a batch of launches. Where nothing waits,
        runs or is being launched (``workloads.loop_has_work``), phases 2-9 are skipped:
        such a tick is health and one small read."""
        with self._tick_lock:
            t0 = time.perf_counter()
            self._guarded(self.sync_health)  # 1
            self.idle = not self._inflight and self._guarded(self._has_work) is False
            result = PassResult(claimed=[]) if self.idle else self._work(wait_launches)
            self.stats.ticks += 1
            self.stats.launched += len(result.claimed)
            self.stats.conflicts += result.conflicts
            self.stats.policy_errors += result.policy_errors
            unplaced = result.unplaced or {}
            since = self.stats.since_for(unplaced, utcnow())
            self.stats.last_tick_s = time.perf_counter() - t0
            self._guarded(self.publish, unplaced, since)  # first: what the API reads is never behind ``stats``
            self.stats.unplaced, self.stats.since = unplaced, since
            if result.conflicts:
                self._wake.set()  # stale snapshot: try again at once
            return result

    def _work(self, wait_launches: bool) -> PassResult:
        """Phases 2-9 of a tick, after the GPU indices backends chose (1b)."""
        self._guarded(health.sync_placements, self.db, self.backends)  # 1b
        poll = time.monotonic() - self._last_poll >= self.poll_interval_s or self._exited.is_set()
        if poll:
            self._exited.clear()
            self._last_poll = time.monotonic()
        ended = bool(
            self._guarded(  # 2
                reconcile.reconcile_running,
                self.db,
                self.backends,
                self.data_dir,
                self.stop_grace_s,
                not poll,
                self.plane.clock,
            )
        )
        if ended or poll:
            self._guarded(verify_jobs.collect, self.plane)  # 2b
        reclaiming = bool(self._guarded(self._reclaim_due))
        if reclaiming:
            ended |= bool(self._guarded(failover, self.plane))  # 3
            self._guarded(withdraw_needless, self.plane)  # 4, first: a migration its request no longer needs
            ended |= bool(self._guarded(expire_notices, self.plane))  # 4
            self._guarded(outbid, self.plane)  # 5
        if poll:
            self._guarded(funds.notice_unfunded, self.plane)  # 5b
        self._guarded(self.cancel_doomed)  # 6
        if ended:
            self.work_ended()
        work, held = self.admit()  # 6
        if reclaiming and held:
            self._guarded(withdraw_needless, self.plane, held)  # 6b: nor one billing holds
        if reclaiming:
            self._guarded(preempt, self.plane, work)  # 7
        if self.plane.migration.moves:
            self._guarded(self.migrator.migrate, work)  # 7b
        result = schedule_pass(  # 8
            self.db,
            self.policy,
            list(self.backends),
            self.owner,
            work,
            held,
            memo=self._memo,
            fallback=self.fallback,
            prepare=self._plan,
        )
        if reclaiming and result.unplaced:  # notices may be pending: their beneficiaries' reasons say so
            annotated = self._guarded(self._making_room, result.unplaced)
            result.unplaced = annotated if isinstance(annotated, dict) else result.unplaced
        if result.claimed:  # 9
            plans = cast("dict[tuple[str, int], Plan | None]", result.prepared)  # made by ``_plan``
            launches = [self._launcher.submit(self._launch, *c, plans.get(c)) for c in result.claimed]
            with self._inflight_lock:
                self._inflight.update(launches)
            for f in launches:
                f.add_done_callback(self._launched)
            if wait_launches:
                wait(launches)
        return result

    def publish(self, unplaced: dict[tuple[str, int], Reason], since: dict[tuple[str, int], tuple[str, datetime]]) -> None:
        """The counters and this pass's waiting reasons, to the database (``loop_report``)."""
        st = self.stats
        # the reclaim phases' counters go by the same names
        counters = Counters(
            self.owner,
            st.ticks,
            st.launched,
            st.conflicts,
            st.policy_errors,
            st.last_tick_s,
            len(unplaced),
            None,
            **asdict(self.plane.stats),
        )
        self.report.publish(counters, unplaced, since)

    @staticmethod
    def _guarded(phase: Callable[..., object], *args: object) -> object:
        try:
            return phase(*args)
        except Exception:
            log.exception("control loop phase %s failed", getattr(phase, "__name__", phase))
            return None

    def sync_health(self, force: bool = False) -> None:
        """Phase 1: node health (backends' reports and heartbeats), every
        ``health_interval_s``."""
        if not force and time.monotonic() - self._last_health < self.health_interval_s:
            return
        if self.heartbeat_timeout_s is not None:
            heartbeat.expire(self.db, self.heartbeat_timeout_s)
        health.sync_node_health(self.db, self.backends)
        self._last_health = time.monotonic()

    def _has_work(self) -> bool:
        with self.db.reads() as s:  # on SQLite, not behind the API's writes
            return workloads.loop_has_work(s)

    def _making_room(self, unplaced: dict[tuple[str, int], Reason]) -> dict[tuple[str, int], Reason]:
        with self.db.reads() as s:
            return making_room(s, unplaced)

    def _reclaim_due(self) -> bool:
        """Whether phases 3-5 and 7 have anything to do (``workloads.reclaim_due``)."""
        with self.db.transaction() as s:
            return workloads.reclaim_due(s)

    def cancel_doomed(self) -> list[int]:
        """Phase 6, first half: the jobs cancelled because a dependency failed."""
        with self.db.transaction() as s:
            return pipelines.cancel_doomed(s)

    def admit(self) -> tuple[list[Waiting], dict[tuple[str, int], Reason]]:
        """Phase 6: the waiting work that may run now (in scheduling order, spot bids'
        models narrowed) and the reasons for what is held; rejected rows fail here."""
        with self.db.transaction() as s:
            work = waiting_work(s)
            shape = sizing.inventory_fingerprint(s)
            if shape != self._inventory:  # nodes came or went: what can never run now fails, with why
                gone = sizing.fail_never_fits(s, work)
                work = [w for w in work if (w.kind, w.id) not in gone]
            decided = admission.admit(s, work)
        self._inventory = shape
        return decided.admitted(work), decided.reasons()

    def _plan(self, s: Session, row: Instance | Job, allocs: list[Allocation]) -> Plan | None:
        """A launch's ``plan``, in its claim's transaction; None where it cannot be made
        (the launch makes it again, and fails with the reason)."""
        try:
            return plan(s, row, allocs, self.data_dir, self.plane.keyring)
        except SQLAlchemyError:
            raise  # the claim's transaction is spoilt: the claim fails as any other would
        except Exception:  # noqa: BLE001 - e.g. a checkpoint path out of its volume
            return None

    def _launch(self, kind: str, wid: int, planned: Plan | None = None) -> None:
        if self._halt.is_set():  # shutting down: leave it for the next start
            unclaim(self.db, kind, wid, self.owner)
            return
        try:
            launch(self.db, self.backends, kind, wid, self.owner, self.data_dir, self.plane.keyring, planned)
        except Exception as exc:
            log.exception("launching %s %s failed", kind, wid)
            fail_launch(self.db, kind, wid, self.owner, f"{type(exc).__name__}: {exc}")

    def _launched(self, done: Future[None]) -> None:
        with self._inflight_lock:
            self._inflight.discard(done)

    def wake(self) -> None:
        self._wake.set()

    def task_exited(self) -> None:
        """A backend saw a task end: poll now, so what waits on it (a pipeline's next
        job, queued work wanting its GPUs) need not wait for ``poll_interval_s``."""
        self._exited.set()
        self._wake.set()

    def _run(self) -> None:
        try:
            self.recover()
        except Exception:
            log.exception("recovery failed")
        try:
            self.stats.since = self.report.load_since()  # a restarted worker's rows keep waiting since then
        except Exception:
            log.exception("reading the previous waiting reasons failed")
        while not self._halt.is_set():
            try:
                self.tick(wait_launches=False)
            except Exception:
                log.exception("control loop tick failed")
            self._wake.wait(self.idle_wait_s if self.idle else self.interval_s)
            self._wake.clear()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="suanli-control-loop", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        with self._inflight_lock:
            inflight = list(self._inflight)
        wait(inflight, timeout=30)  # launches in flight end (or are unclaimed) first
