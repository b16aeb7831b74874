"""Migrations for a request of several nodes (a gang), with any migration planner
(``repack.PLANNERS``), which plan for one node at a time; and the moves such plans
make, one per share. Shared by the live loop (``control.migrate``) and the replay
(``sim.replay``), so a gang gets room the same way in both."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import replace

from suanli.scheduler.defrag import DefragPlan, Migration, MovableSet, apply_plan
from suanli.scheduler.model import Allocation, Request
from suanli.scheduler.state import ClusterState


def plan_gang_moves(
    planner: Callable[..., DefragPlan | None], state: ClusterState, req: Request, movable: MovableSet, max_moves: int
) -> list[DefragPlan] | None:
    """Plans that make room for each of the ``req.nodes`` members of a whole-GPU request
    on a node of its own, at most ``max_moves`` migrations in all, or None. Member by
    member on a copy of ``state``: each plan's moves applied and its member bound before
    the next plan, and that member's node closed to the rest, since a gang's members
    need distinct nodes and a moved share must not land where a member goes. One
    member (``req.nodes == 1``) is one call of ``planner``. ``movable`` (indexed on
    ``state``) ends with the shares where the plans put them; ``state`` is unchanged."""
    member = replace(req, nodes=1)
    trial = state.copy()
    plans: list[DefragPlan] = []
    for _ in range(req.nodes):
        plan = planner(trial, member, movable, max_moves - sum(p.moves for p in plans))
        if plan is None:
            return None
        apply_plan(trial, plan, movable)
        trial.bind(plan.allocation)
        trial.set_schedulable(plan.allocation.node, False)
        plans.append(plan)
    return plans


def net_moves(plans: list[DefragPlan]) -> list[Migration]:
    """The moves of ``plan_gang_moves``' plans, one per share: from where it is to where
    the last plan put it (a later member's plan may move a share an earlier one moved);
    none that ends where it started. Applied all at once (every share off its GPU, then
    onto its new one), as the live platform evicts them together, they always fit: the
    last plan's state holds them all."""
    first: dict[Hashable, Migration] = {}
    last: dict[Hashable, Allocation] = {}
    for plan in plans:
        for m in plan.migrations:
            first.setdefault(m.key, m)
            last[m.key] = m.new
    return [Migration(k, m.old, last[k]) for k, m in first.items() if last[k] != m.old]
