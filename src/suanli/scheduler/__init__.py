"""Suanli's scheduler: a pure library (no I/O, no database) shared by the live
platform and the simulator. See ``framework`` for the cycle and ``policies`` for
the placement strategies."""

from suanli.scheduler.framework import Placement, Scheduler, feasible_mask
from suanli.scheduler.model import MILLI_PER_GPU, Allocation, Node, PriorityClass, Request
from suanli.scheduler.policies import POLICIES, TargetWorkload, make_policy
from suanli.scheduler.state import ClusterState, OverAllocation

__all__ = [
    "MILLI_PER_GPU",
    "Allocation",
    "ClusterState",
    "Node",
    "OverAllocation",
    "POLICIES",
    "Placement",
    "PriorityClass",
    "Request",
    "Scheduler",
    "TargetWorkload",
    "feasible_mask",
    "make_policy",
]
