"""Preemption: admitted reserved/on-demand work that does not fit asks the
preemption planner (``scheduler.preemption``; least lost work: GPU-seconds since
each victim's newest checkpoint file) for spot victims. Each victim is told at once
(``notice.notify``: SIGUSR1, with the deadline written to
``$SUANLI_PREEMPT_DEADLINE_FILE``); the request waits for the notice to run out
instead of choosing more victims meanwhile. A gang gets one plan per node it lacks,
all or nothing. The plans come from ``scheduler.reclaim.plan_reclaim``, the recipe
the trace replay measures.

Work held by quotas or budgets is not preempted for (the tick passes only admitted
work): evicting a spot job would not let it start.
"""

from __future__ import annotations

from collections.abc import Sequence

from suanli.backends.base import Handle
from suanli.control import workloads
from suanli.control.capacity import snapshot, to_sched_allocation
from suanli.control.evict import last_checkpoint
from suanli.control.notice import notice_of, notify
from suanli.control.plane import Plane
from suanli.control.scheduling import Waiting
from suanli.db.models import Instance, Job
from suanli.scheduler import PriorityClass
from suanli.scheduler.framework import node_ranks
from suanli.scheduler.preemption import Candidate
from suanli.scheduler.reclaim import Claim, plan_reclaim


def preempt(plane: Plane, admitted: Sequence[Waiting]) -> list[tuple[str, int]]:
    """Choose spot victims for admitted higher-class work that does not fit; notify them.
    ``admitted`` is in the scheduling order (highest class first, then oldest)."""
    now = plane.clock.now()
    with plane.db.transaction() as s:
        noticed_for: set[str] = set()
        spot_rows: list[tuple[str, Job | Instance]] = []
        for kind, row in workloads.running(s):
            notice = notice_of(row)
            if notice is not None:
                noticed_for.add(notice.beneficiary)
            elif row.priority == PriorityClass.SPOT.value:
                spot_rows.append((kind, row))
        if not spot_rows:
            return []
        waiting = [  # not spot, and not already waiting for its victims
            w for w in admitted if w.request.priority is not PriorityClass.SPOT and f"{w.kind}-{w.id}" not in noticed_for
        ]
        if not waiting:
            return []
        snap = snapshot(s, list(plane.backends))
        names = {nid: name for name, nid in snap.node_ids.items()}
        cands: list[Candidate] = []
        handles: dict[tuple[str, int], list[Handle]] = {}
        for kind, row in spot_rows:
            handles[(kind, row.id)] = [Handle.from_json(h) for h in row.handles or []]
            for a in workloads.open_allocations(s, kind, row.id):
                started = a.started_at.timestamp()
                unsaved = now - max(started, last_checkpoint(plane, row) or started)
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
    # work that fits already gets no plan (the scheduling phase places it), nor work no eviction makes fit
    claims = [Claim(f"{w.kind}-{w.id}", w.request, w.num_nodes) for w in waiting]
    for plan in plan_reclaim(state, claims, cands, ranks, plane.reclaim.strategy, _workload):
        where = ", ".join(plan.nodes)
        for vkind, vid in sorted(plan.workloads):
            if notify(plane, vkind, vid, handles[(vkind, vid)], plan.beneficiary, where):
                told.append((vkind, vid))
    return told


def _workload(key: tuple[str, int, int]) -> tuple[str, int]:
    """A candidate ``(kind, id, node_rank)`` belongs to the row ``(kind, id)``."""
    return key[0], key[1]
