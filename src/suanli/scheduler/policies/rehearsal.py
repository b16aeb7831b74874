"""A rehearsal: fill an empty copy of the cluster with draws from the mix, to measure
what a policy allocates before it is trusted with the real arrivals.

Why: a tie-break key can gain on one mix and lose on another that looks the same to
every figure the policy computes. Key 1 of ``suanli.py`` (scarce GPU models) gained 0.5
to 0.8 points on gpuspec10, gpuspec25 and g-mix-all and lost 0.15 to 0.25 on
u-gpuspec12 and u-mix-spec15-multi30, with T4 alone one pressure step up on both
gpuspec10 and u-gpuspec12 (issue 16, BENCHMARKS.md). But on a given mix its sign hardly
depends on the arrival order: all ten seeds lost on u-gpuspec12, all ten gained on
gpuspec10. So fills of the mix itself, with the key and without, tell whether it
helps, where no threshold on the pressure could. Key 6 (memory kept for idle GPUs on
mixes of shares) is decided the same way, with draws that ask for memory.

A rehearsal only reads the cluster's nodes and the mix (the target the policy already
plans for); it draws requests from the mix's shapes by their weights with its own
seeds, never from the arrivals it will be asked to place.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from suanli.scheduler.framework import Scheduler
from suanli.scheduler.model import Node
from suanli.scheduler.policies.target import TargetWorkload
from suanli.scheduler.policy import Policy
from suanli.scheduler.state import ClusterState

#: The rehearsals' seeds: one arrival order per candidate. A fill of half the Alibaba
#: cluster takes 1-2 s with the whole mix's rare shapes; with two orders each the
#: rehearsals took up to 7 s on a quiet machine, and fills with them ran to 13.8 s two
#: at a time, over the 10 s a fill may take.
SEEDS = (1,)
#: A rehearsal fills every ``EVERY``-th node of the cluster (each model keeps about
#: its share), in half the time of the whole cluster. A third or a quarter of it was
#: faster but gave key 1 the wrong sign on one and two of the eleven mixes where key 1
#: moves allocation by more than 0.1 points (issue 16, BENCHMARKS.md).
EVERY = 2


def allocated(nodes: Sequence[Node], mix: TargetWorkload, policy: Policy, seed: int, with_memory: bool = False) -> int:
    """GPU milli ``policy`` has allocated on an empty cluster of ``nodes`` once requests
    drawn from ``mix`` have asked for the cluster's whole GPU capacity (the fill
    experiment's "allocated at 100 % arrived"). ``with_memory``: each request asks for
    its shape's mean memory (``TargetWorkload.memory_mib``), for a key about memory."""
    state = ClusterState(nodes)
    scheduler = Scheduler(policy, state, seed=seed)
    # Key 1's draws ask for no memory: drawn with each shape's mean memory, its rehearsals
    # turned the verdict on 5 of the 23 traces it decides and lost 0.025 points on average
    # (seeds 42-45; g-gpuspec15 -0.30, u-gpuspec40 +0.24; issue 16, session 46).
    requests = [shape.request() for shape in mix.shapes]
    if with_memory and mix.memory_mib is not None:
        requests = [replace(r, memory_mib=int(m)) for r, m in zip(requests, mix.memory_mib, strict=True)]
    asked = np.array([r.total_gpu_milli for r in requests], dtype=np.float64)
    mean = float(mix.weights @ asked)
    if mean <= 0:
        return 0
    rng = np.random.default_rng(seed)
    arrived = used = 0
    while arrived < state.total_gpu_milli:
        batch = max(64, int((state.total_gpu_milli - arrived) / mean))
        for k in rng.choice(len(requests), size=batch, p=mix.weights):
            if arrived >= state.total_gpu_milli:
                break
            req = requests[k]
            arrived += req.total_gpu_milli
            alloc = scheduler.schedule(req).allocation
            used += alloc.total_gpu_milli if alloc is not None else 0
    return used


def better(nodes: Sequence[Node], target: TargetWorkload, make: Callable[[bool], Policy], with_memory: bool = False) -> bool:
    """Whether ``make(True)`` allocates strictly more than ``make(False)`` over the
    rehearsals of ``target``'s whole mix (a tie keeps the simpler ``make(False)``)."""
    mix, small = target.whole or target, list(nodes)[::EVERY]
    with_it, without = both(lambda key: sum(allocated(small, mix, make(key), seed, with_memory) for seed in SEEDS))
    return with_it > without


def both(fill: Callable[[bool], int]) -> tuple[int, int]:
    """``(fill(True), fill(False))``, the first in a forked child while the parent runs
    the second, where that is safe: a process with one thread (``suanli sim fill``; a
    fork copies no other thread, so a lock another thread held would stay held in the
    child) on a machine with a core to spare. Elsewhere (the live worker's process,
    test workers) in turn. The two fills are independent and take about as long, so a
    fill experiment that rehearses gains about one fill's time (0.5-2.7 s on the
    Alibaba cluster, issue 16, BENCHMARKS.md)."""
    if not hasattr(os, "fork") or threading.active_count() > 1 or (os.cpu_count() or 1) < 2:
        return fill(True), fill(False)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one figure down the pipe, then out without the parent's exit handlers
        code = 1
        try:
            os.close(read)
            os.write(write, str(fill(True)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        try:
            without = fill(False)
            answer = pipe.read()
        finally:
            _, status = os.waitpid(pid, 0)
    if status != 0 or not answer:  # the child failed: its fill again, here (an error shows itself)
        return fill(True), without
    return int(answer), without
