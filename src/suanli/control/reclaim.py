"""Live spot reclaim with notice, and node failover from checkpoints.

The simulator (``sim/replay.py``) defines the behaviour; this is the same recipe on
real backends, one ``Reclaimer.step`` per control-loop tick (a ``ControlLoop.steps``
hook: after reconcile, before the scheduling pass, which then places requeued work):

1. **Health.** Slurm-backed nodes take their state from ``sinfo`` (``slurm_sync``);
   other nodes are down when their agent's heartbeats stop (``heartbeat``) or when an
   operator marks them down.
2. **Failover.** Running work with an allocation on a ``down`` node is stopped there
   and requeued: a job with ``checkpoint_dir`` goes back to ``queued`` with
   ``SUANLI_RESUME_FROM`` set, so the scheduler places it on a healthy node and it
   resumes from its latest checkpoint; a job without one fails (nothing to resume
   from, as in the simulator); an instance fails.
3. **Outbid.** Running spot work whose bid (``max_price``) is below the current spot
   price of the model it runs on (``billing.spot``: the price the rater uses, at the
   utilisation now) gets the same notice, lowest bid first, and only as many as it
   takes: work already under notice counts as gone, so reclaiming one bidder can bring
   the price back under the next one's bid. A notice is final, as on AWS.
4. **Expiry.** A spot victim whose notice deadline passed gets SIGTERM (then KILL after
   the grace period), its allocation is released and it is requeued the same way
   (instances: ``preempted`` then ``pending``) to resume when capacity returns (and,
   for an outbid one, when admission finds the price at or below its bid again). A job
   that ends during its notice is due at once (``reconcile`` moves its deadline to now).
5. **Planning.** Waiting reserved/on-demand work that does not fit asks
   ``plan_preemption`` (least lost work: GPU-seconds since each victim's newest
   checkpoint file) for spot victims. Each victim is told at once: SIGUSR1, with the
   deadline written to ``$SUANLI_PREEMPT_DEADLINE_FILE``; the request waits for the
   notice to run out instead of choosing more victims meanwhile. A gang gets one plan
   per node it lacks, all or nothing (``_gang_plan``).

A notice is stored in the victim's handles (``data.notice``: deadline, beneficiary or why),
so a restarted server keeps the deadlines it promised. Every step appends events, so
the event log shows each failover and reclaim with timestamps. Backend calls happen
with no transaction open.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from sqlalchemy import select

from suanli.backends.base import Backend, BackendError, Handle
from suanli.billing import spot
from suanli.billing.enforce import admission
from suanli.control import heartbeat, slurm_sync
from suanli.control.capacity import give_back, snapshot, to_sched_allocation
from suanli.control.launcher import checkpoint_dir
from suanli.control.lifecycle import record_event, transition
from suanli.control.notice import deliver_notice, notice_of, with_notice
from suanli.control.scheduling import waiting_work
from suanli.db.clock import utcnow
from suanli.db.models import Allocation, Instance, Job, Node
from suanli.db.session import Database
from suanli.scheduler import PriorityClass
from suanli.scheduler.framework import feasible_mask, node_ranks
from suanli.scheduler.model import Request
from suanli.scheduler.preemption import Candidate, PreemptionPlan, plan_preemption
from suanli.scheduler.state import ClusterState

log = logging.getLogger(__name__)

#: How much earlier than its own deadline a victim may be evicted with its siblings
#: (noticed for the same beneficiary; see ``Reclaimer.expire_notices``).
SIBLING_SLACK_S = 1.0

DEFAULT_NOTICE_S = 300.0


@dataclass
class ReclaimStats:
    notices: int = 0
    reclaimed: int = 0
    failed_over: int = 0


class Reclaimer:
    """Runs health sync, failover, notice expiry and preemption planning."""

    def __init__(
        self,
        db: Database,
        backends: dict[str, Backend],
        data_dir: Path,
        *,
        notice_s: float = DEFAULT_NOTICE_S,
        grace_s: float = 10.0,
        strategy: str = "least_lost_work",
        health_interval_s: float = 1.0,
        heartbeat_timeout_s: float | None = heartbeat.DEFAULT_TIMEOUT_S,
    ) -> None:
        """``heartbeat_timeout_s``: silence after which a node with an agent is down (None: never)."""
        if notice_s < 0 or grace_s < 0:
            raise ValueError("notice_s and grace_s must be >= 0")
        self.db = db
        self.backends = backends
        self.data_dir = Path(data_dir)
        self.notice_s = notice_s
        self.grace_s = grace_s
        self.strategy = strategy
        self.health_interval_s = health_interval_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self._last_health = -float("inf")
        self.stats = ReclaimStats()

    # -- the tick ------------------------------------------------------------------------
    def step(self) -> None:
        """One pass; each part is independent, so one failing does not stop the others.

        On SQLite every transaction takes the write lock, so a tick with no down node and
        no running spot work (the common case) costs one small read, not one per part.
        Health is synced before that read, so work on a node found down fails over in the
        same tick, not one tick later."""
        try:
            self.sync_health()
        except Exception:
            log.exception("reclaim step sync_health failed")
        todo = False
        try:
            todo = self._anything_to_do()
        except Exception:
            log.exception("reclaim step: reading the database failed")
        for part in (self.failover, self.outbid, self.expire_notices, self.plan) if todo else ():
            try:
                part()
            except Exception:
                log.exception("reclaim step %s failed", part.__name__)

    def _anything_to_do(self) -> bool:
        """A node is down, or spot work runs (a victim to notice, or a notice to expire)."""
        spot = PriorityClass.SPOT.value
        with self.db.transaction() as s:
            if s.scalar(select(Node.id).where(Node.state == "down").limit(1)) is not None:
                return True
            if s.scalar(select(Job.id).where(Job.state == "running", Job.priority == spot).limit(1)) is not None:
                return True
            return (
                s.scalar(select(Instance.id).where(Instance.state == "running", Instance.priority == spot).limit(1)) is not None
            )

    def sync_health(self, force: bool = False) -> None:
        """Node health (Slurm's and heartbeats, every ``health_interval_s``) and the GPU
        indices Slurm chose (every tick)."""
        from suanli.backends.slurm.backend import SlurmBackend

        due = force or time.monotonic() - self._last_health >= self.health_interval_s
        if due and self.heartbeat_timeout_s is not None:
            heartbeat.expire(self.db, self.heartbeat_timeout_s)
        for b in self.backends.values():
            if isinstance(b, SlurmBackend):
                if due:
                    slurm_sync.sync_node_health(self.db, b)
                slurm_sync.sync_placements(self.db, b)
        if due:
            self._last_health = time.monotonic()

    # -- failover ------------------------------------------------------------------------
    def failover(self) -> list[tuple[str, int]]:
        """Requeue (or fail) running work that holds an allocation on a down node."""
        with self.db.transaction() as s:
            down = {n.id: n.name for n in s.scalars(select(Node).where(Node.state == "down"))}
            if not down:
                return []
            hit: dict[tuple[str, int], str] = {}
            for a in s.scalars(select(Allocation).where(Allocation.ended_at.is_(None), Allocation.node_id.in_(down))):
                key = ("job", a.job_id) if a.job_id else ("instance", a.instance_id)
                hit.setdefault(key, down[a.node_id])  # type: ignore[arg-type]
        done = []
        for (kind, wid), node in sorted(hit.items()):
            if self._evict(kind, wid, "failover", f"node {node} is down"):
                self.stats.failed_over += 1
                done.append((kind, wid))
        return done

    # -- notices -------------------------------------------------------------------------
    def expire_notices(self) -> list[tuple[str, int]]:
        """Evict spot victims whose notice ran out.

        The victims noticed for one beneficiary leave together: their deadlines differ by
        the milliseconds between their notices, and one leaving a pass before the others
        would let the scheduling pass in between give its capacity back to spot work
        before the beneficiary (a gang needing every victim's node) fits; that repeats
        forever. A sibling due within ``SIBLING_SLACK_S`` is evicted with the first."""
        now = time.time()
        noticed = []
        with self.db.transaction() as s:
            for model, kind in ((Job, "job"), (Instance, "instance")):
                for row in s.scalars(select(model).where(model.state == "running", model.handles.is_not(None))):
                    notice = notice_of(row.handles)
                    if notice is not None:
                        noticed.append((kind, row.id, notice))
        expiring = {n.get("for") for _, _, n in noticed if n["deadline"] <= now}
        due = [
            (kind, wid, n)
            for kind, wid, n in noticed
            if n["deadline"] <= now or (n.get("for") in expiring and n["deadline"] <= now + SIBLING_SLACK_S)
        ]
        done = []
        for kind, wid, notice in due:
            ended = "it ended during its notice" if notice.get("ended_early") else "expired"
            why = f"{notice.get('why') or 'spot reclaim for ' + notice['for']}: notice of {notice['notice_s']:.0f}s {ended}"
            if self._evict(kind, wid, "reclaim", why):
                self.stats.reclaimed += 1
                done.append((kind, wid))
        return done

    def plan(self) -> list[tuple[str, int]]:
        """Choose spot victims for waiting higher-class work that does not fit; notify them.

        Work held by quotas or budgets (``billing.enforce.admission``) is not preempted
        for: evicting a spot job would not let it start."""
        now = time.time()
        with self.db.transaction() as s:
            noticed_for: set[str] = set()
            spot_rows: list[tuple[str, Job | Instance]] = []
            for model, kind in ((Job, "job"), (Instance, "instance")):
                for row in s.scalars(select(model).where(model.state == "running", model.handles.is_not(None))):
                    notice = notice_of(row.handles)
                    if notice is not None:
                        noticed_for.add(notice["for"])
                    elif row.priority == PriorityClass.SPOT.value:
                        spot_rows.append((kind, row))
            if not spot_rows:
                return []
            waiting = [
                w
                for w in waiting_work(s)
                if w.request.priority is not PriorityClass.SPOT and f"{w.kind}-{w.id}" not in noticed_for
            ]  # already waiting for its victims
            held, rejected = admission(s, waiting) if waiting else ({}, {})
            waiting = [w for w in waiting if (w.kind, w.id) not in held and (w.kind, w.id) not in rejected]
            if not waiting:
                return []
            snap = snapshot(s, list(self.backends))
            names = {nid: name for name, nid in snap.node_ids.items()}
            cands: list[Candidate] = []
            handles: dict[tuple[str, int], list[Handle]] = {}
            for kind, row in spot_rows:
                handles[(kind, row.id)] = [Handle.from_json(h) for h in row.handles or []]
                col = Allocation.job_id if kind == "job" else Allocation.instance_id
                for a in s.scalars(select(Allocation).where(col == row.id, Allocation.ended_at.is_(None))):
                    started = a.started_at.timestamp()
                    unsaved = now - max(started, self._last_checkpoint(row) or started)
                    gpus = len(a.gpu_indices) * a.milli_per_gpu / 1000
                    cands.append(
                        Candidate(
                            (kind, row.id, a.node_rank),
                            to_sched_allocation(a, names[a.node_id]),
                            PriorityClass.SPOT,
                            unsaved * gpus,
                            started,
                        )
                    )
        state = snap.state
        ranks = node_ranks([n.name for n in state.nodes], 0)
        told: list[tuple[str, int]] = []
        for w in waiting:  # highest class first, then oldest (waiting_work's order)
            plans = self._gang_plan(state, w.request, w.num_nodes, cands, ranks)
            if not plans:
                continue  # it fits already (the scheduling pass places it), or no plan exists
            victims = sorted({(v.key[0], v.key[1]) for p in plans for v in p.victims})
            cands = [c for c in cands if (c.key[0], c.key[1]) not in victims]
            where = ", ".join(p.node for p in plans)
            for vkind, vid in victims:
                if self._notify(vkind, vid, handles[(vkind, vid)], f"{w.kind}-{w.id}", where):
                    told.append((vkind, vid))
        return told

    def _gang_plan(
        self, state: ClusterState, request: Request, num_nodes: int, cands: list[Candidate], ranks: np.ndarray
    ) -> list[PreemptionPlan]:
        """Preemption plans for the nodes a request of ``num_nodes`` distinct nodes still
        lacks (one plan per missing node, each on a node no other plan or free node
        gives); [] when it fits without eviction or cannot be made to fit. Nodes are
        picked one at a time by ``plan_preemption``'s cost, without topology preference."""
        taken = set(np.flatnonzero(feasible_mask(state, request)).tolist())
        if len(taken) >= num_nodes:
            return []
        plans = []
        for _ in range(num_nodes - len(taken)):
            plan = plan_preemption(
                state, request, [c for c in cands if state.index[c.allocation.node] not in taken], ranks, self.strategy
            )
            if plan is None:
                return []  # all or nothing: no notice unless the whole gang can be made to fit
            taken.add(state.index[plan.node])
            plans.append(plan)
        return plans

    def outbid(self) -> list[tuple[str, int]]:
        """Notice running spot work whose bid is below the current spot price of a model
        it runs on; lowest bid first (newest first among equal bids), and once noticed
        its GPUs count as gone for the bids after it. Backend calls as in ``plan``."""
        spot_class = PriorityClass.SPOT.value
        with self.db.transaction() as s:
            active = list(s.scalars(select(Allocation).where(Allocation.ended_at.is_(None), Allocation.priority == spot_class)))
            if all(a.max_price_micros is None for a in active):  # the bid is copied onto each slot (capacity.take)
                return []
            owned: dict[tuple[str, int], list[tuple[str, int, float]]] = {}
            for a in active:
                key = ("job", a.job_id) if a.job_id else ("instance", a.instance_id)
                owned.setdefault(key, []).append((a.gpu_model, len(a.gpu_indices) * a.milli_per_gpu, a.started_at.timestamp()))
            mk = spot.market(s)
            cands = []
            for (kind, wid), allocs in owned.items():
                row = s.get(Job if kind == "job" else Instance, wid)
                if row is None or row.state != "running" or not row.handles:
                    continue
                if notice_of(row.handles) is not None:  # leaving already: its GPUs do not set the price
                    for m, milli, _ in allocs:
                        mk.busy[m] = mk.busy.get(m, 0) - milli
                elif row.max_price_micros is not None:
                    cands.append(
                        (
                            row.max_price_micros,
                            -max(t for _, _, t in allocs),
                            kind,
                            wid,
                            allocs,
                            [Handle.from_json(h) for h in row.handles],
                        )
                    )
        told: list[tuple[str, int]] = []
        for bid, _, kind, wid, allocs, handles in sorted(cands, key=lambda c: c[:4]):
            over = [(m, p) for m in sorted({m for m, _, _ in allocs}) if (p := mk.price(m)) is not None and p > bid]
            if not over:
                continue
            m, p = over[0]
            why = (
                f"spot price {mk.price_text(p)}/GPU-h for {m} is above max_price {mk.text(bid)} "
                f"(at {mk.utilisation(m) / 10:g} % utilisation)"
            )
            if self._notify(kind, wid, handles, "price", m, why=why):
                told.append((kind, wid))
                for am, milli, _ in allocs:
                    mk.busy[am] = mk.busy.get(am, 0) - milli
        return told

    def _notify(self, kind: str, wid: int, handles: list[Handle], beneficiary: str, node: str, why: str | None = None) -> bool:
        """Record the notice (transaction), then deliver SIGUSR1 (no transaction). ``why``
        replaces "spot reclaim for <beneficiary> on <node>" in the events."""
        deadline = time.time() + self.notice_s
        notice = {"deadline": deadline, "for": beneficiary, "notice_s": self.notice_s, "at": time.time()}
        if why:
            notice["why"] = why
        with self.db.transaction() as s:
            row = s.get(Job if kind == "job" else Instance, wid)
            if row is None or row.state != "running" or not row.handles or notice_of(row.handles) is not None:
                return False
            row.handles = with_notice(row.handles, notice)
            when = datetime.fromtimestamp(deadline, tz=UTC).isoformat(timespec="seconds")
            record_event(
                s,
                kind,
                wid,
                "running",
                "noticed",
                f"{why or f'spot reclaim for {beneficiary} on {node}'}: SIGUSR1 now, SIGTERM at {when} "
                f"({self.notice_s:.0f}s notice)",
            )
        for h in handles:
            try:
                # an instance's keeper process would die of USR1: it gets the deadline file only
                deliver_notice(self.backends[h.backend], h, deadline, send_signal=kind == "job")
            except (BackendError, KeyError, OSError) as exc:
                log.warning("notice to %s failed: %s", h.key, exc)
        self.stats.notices += 1
        return True

    # -- eviction ------------------------------------------------------------------------
    def _evict(self, kind: str, wid: int, cause: str, why: str) -> bool:
        """Stop every task of the row (no transaction), then release and requeue it."""
        model = Job if kind == "job" else Instance
        with self.db.transaction() as s:
            row = s.get(model, wid)
            if row is None or row.state != "running":
                return False
            handles = [Handle.from_json(h) for h in row.handles or []]
        for h in handles:
            b = self.backends.get(h.backend)
            if b is not None:
                try:
                    b.stop(h, grace_s=self.grace_s if cause == "reclaim" else 0.0)
                except BackendError as exc:
                    # Not known to be stopped: releasing now could hand its GPUs out twice
                    # and a resubmission would be refused as already running. Keep it as
                    # it is; the next tick tries again.
                    log.warning("stopping %s for %s failed, will retry: %s", h.key, cause, exc)
                    return False
        with self.db.transaction() as s:
            row = s.get(model, wid)
            if row is None or row.state != "running":
                return False
            give_back(s, row)
            row.handles = None
            if isinstance(row, Instance):
                transition(s, row, "failed" if cause == "failover" else "preempted", why)
                if cause != "failover":
                    transition(s, row, "pending", "waits for capacity to start again")
                return True
            ckpt = row.spec.get("checkpoint_dir")
            if cause == "failover" and not ckpt:
                row.finished_at = utcnow()
                transition(s, row, "failed", f"{why}; no checkpoint_dir to resume from")
                return True
            transition(s, row, "requeued", why)
            envs = dict(row.spec.get("envs") or {})
            envs["SUANLI_REQUEUES"] = str(int(envs.get("SUANLI_REQUEUES", "0")) + 1)
            resume = ""
            if ckpt:
                envs["SUANLI_RESUME_FROM"] = resume = str(checkpoint_dir(self.data_dir, row.id, ckpt))
            row.spec = {**row.spec, "envs": envs}
            row.exit_code = None
            transition(s, row, "queued", f"requeued; resumes from {resume}" if resume else "requeued; starts over")
        return True

    def _last_checkpoint(self, row: Job | Instance) -> float | None:
        """mtime of the newest file under the job's checkpoint directory (None: none)."""
        if not isinstance(row, Job) or not row.spec.get("checkpoint_dir"):
            return None
        root = checkpoint_dir(self.data_dir, row.id, row.spec["checkpoint_dir"])
        newest = None
        try:
            for entry in os.scandir(root):
                m = entry.stat().st_mtime
                newest = m if newest is None or m > newest else newest
        except OSError:
            return None
        return newest


__all__ = ["DEFAULT_NOTICE_S", "Reclaimer", "ReclaimStats"]
