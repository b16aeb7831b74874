"""Migration: whole-GPU work that waits because the free GPU capacity is scattered over
shared GPUs gets room by moving running shares, with the planner the simulator
measures (``scheduler.repack.PLANNERS``: ``direct`` single moves or ``repack``'s
chains; BENCHMARKS.md, issue 16). A gang (``num_nodes`` > 1) gets room member by
member, each on a node of its own (``gang_moves.plan_gang_moves``).

A move is what the platform can do to a running job: checkpoint, stop, start
elsewhere. So only jobs that can resume move: a single-node job on a share of one GPU
with a ``checkpoint_dir``, not pinned to a node, not already under a notice, and only
for work of its own class or a higher one (spot work never moves an on-demand job). An
instance never moves: it is a renter's machine, with their sessions and processes in
it. Each moved job gets the reclaim notice (SIGUSR1 and the deadline file, then
SIGTERM: ``notice.notify``), so it checkpoints as for a spot reclaim; when the notice
runs out it is requeued from its checkpoint (``expiry``, ``evict``) and the next pass
places the request first, then the moved jobs (``Job.evicted_for``), each where the
plan put it if that GPU still takes it (``Job.moved_to``), as the simulator applies a
plan. The request waits for its notices instead of planning again, as preemption's
beneficiaries do.
Unlike a spot reclaim's, a migration's notice is withdrawn when its request no longer
waits (capacity freed elsewhere, or it was cancelled) or billing holds it (a grant's
GPUs in use, funds that no longer cover it): the move would buy nothing.

One plan per tick, and a request is not planned for again within
``MigrationSettings.retry_s`` (a planning call costs up to half a second of solver
time): by then its moves are done and it runs, or a new plan is sought. Off unless the
operator sets ``--migration-moves``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from sqlalchemy import Row

from suanli.control import workloads
from suanli.control.capacity import snapshot, to_sched_allocation
from suanli.control.lifecycle import record_event
from suanli.control.notice import clear_notice, notify
from suanli.control.plane import Plane
from suanli.control.scheduling import Waiting
from suanli.control.waiting import Reason
from suanli.db.models import Job
from suanli.scheduler import PriorityClass
from suanli.scheduler.defrag import Migration, MovableSet
from suanli.scheduler.framework import feasible_mask
from suanli.scheduler.gang_moves import net_moves, plan_gang_moves
from suanli.scheduler.repack import PLANNERS

#: how a migration's notice reason begins (``Notice.why``)
MIGRATION = "migration for "


@dataclass
class Migrator:
    """The migration phase of a tick, with its memory of the requests it planned for."""

    plane: Plane
    #: request (``job-7``) -> the clock's time it was last planned for
    tried: dict[str, float] = field(default_factory=dict)

    def migrate(self, admitted: Sequence[Waiting]) -> list[tuple[str, int]]:
        """Notice the shares one plan moves for the first admitted whole-GPU request
        (or gang) that does not fit; the jobs noticed."""
        settings, now = self.plane.migration, self.plane.clock.now()
        if settings.moves < 1:
            return []
        wanting = [w for w in admitted if _may_gain(w) and now - self.tried.get(w.name, -1e18) >= settings.retry_s]
        if not wanting:
            return []
        with self.plane.db.transaction() as s:
            noticed = workloads.running(s, lambda m: m.notice_deadline.is_not(None))
            noticed_for = {row.notice_for for _, row in noticed}
            wanting = [w for w in wanting if w.name not in noticed_for]
            if not wanting:
                return []
            shares = [row for row in workloads.running_shares(s) if _movable(row)]
            if not shares:
                return []
            snap = snapshot(s, list(self.plane.backends))
            names = {nid: name for name, nid in snap.node_ids.items()}
            movable = [
                (
                    PriorityClass(row.priority).rank,
                    row.id,
                    to_sched_allocation(row, names[row.node_id]),
                    frozenset(row.gpu_models or ()),
                )
                for row in shares
            ]
        planner = PLANNERS[settings.planner]
        for w in wanting:
            if feasible_mask(snap.state, w.request).sum() >= w.num_nodes:
                continue  # it fits: the scheduling phase places it
            self.tried[w.name] = now
            mine = MovableSet(snap.state)
            for rank, wid, alloc, models in movable:
                if rank <= w.request.priority.rank:
                    mine.add(wid, alloc, models)
            gang = replace(w.request, nodes=w.num_nodes)
            plans = plan_gang_moves(planner, snap.state, gang, mine, settings.moves) if mine else None
            moves = net_moves(plans or [])
            if moves:
                return self._notice(moves, [p.allocation.node for p in plans or []], w)
        return []

    def _notice(self, moves: list[Migration], freed: list[str], w: Waiting) -> list[tuple[str, int]]:
        told, planned = [], {}
        for m in moves:
            job_id = cast(int, m.key)  # the keys ``migrate`` put in the MovableSet
            why = (
                f"{MIGRATION}{w.name}: its share of {m.old.node} GPU {m.old.gpu_indices[0]} moves "
                f"(planned: to {m.new.node} GPU {m.new.gpu_indices[0]}) to free {', '.join(freed)} for it"
            )
            if notify(self.plane, "job", job_id, None, w.name, m.old.node, why=why):
                told.append(("job", job_id))
                planned[job_id] = [m.new.node, m.new.gpu_indices[0]]
        with self.plane.db.transaction() as s:  # where its next placement goes (``Job.moved_to``)
            for job_id, where in planned.items():
                row = workloads.get(s, "job", job_id)
                if isinstance(row, Job):
                    row.moved_to = where
        self.plane.stats.migrations += len(told)
        return told


def withdraw_needless(plane: Plane, held: Mapping[tuple[str, int], Reason] | None = None) -> list[tuple[str, int]]:
    """Withdraw the migration notices whose request no longer waits (phase 4, before
    expiry) or, given admission's ``held`` (after phase 6), waits held by billing: a held
    request is not placed, so the move would interrupt the share for nothing. The work
    whose notice was withdrawn."""
    held_names = {f"{kind}-{wid}": reason for (kind, wid), reason in (held or {}).items()}
    with plane.db.transaction() as s:
        noticed = list(workloads.running(s, lambda m: m.notice_why.startswith(MIGRATION)))
        if not noticed:
            return []
        waiting = {f"{kind}-{row.id}" for kind, row in workloads.waiting(s)}
        withdrawn = []
        for kind, row in noticed:
            if row.notice_for not in waiting:
                why = "no longer waits"
            elif row.notice_for in held_names:
                why = f"is held: {held_names[row.notice_for].text()}"
            else:
                continue
            record_event(s, kind, row.id, "running", "running", f"migration withdrawn: {row.notice_for} {why}")
            clear_notice(row)
            if isinstance(row, Job):
                row.moved_to = None
            withdrawn.append((kind, row.id))
        return withdrawn


def _may_gain(w: Waiting) -> bool:
    """Whole GPUs (on one node or a gang's several), placed by the policy: what moving
    shares can make room for."""
    return w.request.gpu_count > 0 and not w.request.pin_nodes


def _movable(row: Row[Any]) -> bool:
    """A running share (``workloads.running_shares``) that can move: resumable, not pinned."""
    return bool(row.checkpoint_dir) and not row.pin_nodes
