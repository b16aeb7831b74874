"""Test factories: tiny clusters built in one line each."""

from __future__ import annotations

from suanli.scheduler import Allocation, ClusterState, Node, Request, Scheduler, TargetWorkload, make_policy
from suanli.scheduler.policies.suanli import SuanliPolicy


def node(name: str, gpus: int = 8, cpu: int = 96_000, mem: int = 393_216, model: str = "G2") -> Node:
    return Node(name, model, gpus, cpu, mem)


def cluster(*nodes: Node, used: dict[str, list[int]] | None = None, cpu_used: dict[str, int] | None = None) -> ClusterState:
    """A state whose GPUs already carry ``used[node][i]`` milli and nodes ``cpu_used`` CPU."""
    state = ClusterState(list(nodes))
    for name, per_gpu in (used or {}).items():
        for i, milli in enumerate(per_gpu):
            if milli:
                state.bind(Allocation(name, (i,), milli, 0, 0))
    for name, cpu in (cpu_used or {}).items():
        state.bind(Allocation(name, (), 0, cpu, 0))
    return state


def share(milli: int, cpu: int = 1000, mem: int = 0) -> Request:
    return Request(cpu_milli=cpu, memory_mib=mem, gpu_milli=milli)


def whole(count: int, cpu: int = 1000, mem: int = 0) -> Request:
    return Request(cpu_milli=cpu, memory_mib=mem, gpu_count=count)


def scheduler(policy: str, state: ClusterState, target: list[Request] | None = None, seed: int = 0) -> Scheduler:
    """``policy`` on ``state``; "suanli" with every key it applies and no rehearsal
    (``rehearsal.py`` decides key 1 on an empty copy of the cluster, which tells
    nothing on these tiny ones: tests/scheduler/test_rehearsal.py tests it)."""
    tw = TargetWorkload.from_requests(target, coverage=1.0) if target else None
    if policy == "suanli":
        return Scheduler(SuanliPolicy(tw, rehearse=False), state, seed=seed)
    return Scheduler(make_policy(policy, tw, seed), state, seed=seed)
