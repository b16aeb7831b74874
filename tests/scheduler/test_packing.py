"""Packing while the cluster is nearly empty: Suanli's gate on the mix (``policies/suanli.py``)."""

from __future__ import annotations

import pytest

from suanli.scheduler import Allocation, Request
from tests.scheduler.factories import cluster, node, share, whole


def test_suanli_plans_on_no_mix_while_nearly_empty_when_a_fifth_of_the_mix_is_restricted():
    # test_policies.py's CPU-next-to-idle-GPUs case: the mix sends the pod to "rich"
    # whatever the seed. Under a tenth of the GPU milli allocated (PACK_BELOW), a mix
    # with at least a fifth of its requests restricted to model lists (PACK_RESTRICTED)
    # is planned as no mix: the seeded node order decides, as FGD's ties do. With a third node's four GPUs taken
    # (a third of the cluster's milli), or with too few restricted requests, the policy
    # plans on the mix.
    from suanli.scheduler import Scheduler, TargetWorkload
    from suanli.scheduler.policies.suanli import SuanliPolicy

    pinned = Request(cpu_milli=8000, gpu_count=1, gpu_models=frozenset({"G2"}))  # every node is G2
    nodes = [node("poor", gpus=4, cpu=20_000), node("rich", gpus=4, cpu=40_000), node("busy", gpus=4)]
    pod = whole(1, cpu=4000)

    def choices(state, unrestricted: int, **packing):
        mix = TargetWorkload.from_requests([pinned] + [whole(1, cpu=8000)] * unrestricted, coverage=1.0)
        policy = SuanliPolicy(mix, rehearse=False, **packing)
        return {Scheduler(policy, state, seed=s).place(pod).allocation.node for s in range(6)}

    assert "poor" in choices(cluster(*nodes), unrestricted=3)  # a quarter restricted
    assert choices(cluster(*nodes, used={"busy": [1000] * 4}), unrestricted=3) == {"rich"}
    assert "poor" not in choices(cluster(*nodes), unrestricted=5)  # a sixth restricted
    assert "poor" in choices(cluster(*nodes), unrestricted=5, pack_if=None)  # the gate off
    assert "poor" not in choices(cluster(*nodes), unrestricted=3, pack_below=0.0)  # packing off
    # one policy through both: what it kept for the empty cluster is not reused
    mix = TargetWorkload.from_requests([pinned] + [whole(1, cpu=8000)] * 3, coverage=1.0)
    policy = SuanliPolicy(mix, rehearse=False)
    state = cluster(*nodes)
    early = {Scheduler(policy, state, seed=s).place(pod).allocation.node for s in range(6)}
    for i in range(4):
        state.bind(Allocation("busy", (i,), 1000, 0, 0))
    late = {Scheduler(policy, state, seed=s).place(pod).allocation.node for s in range(6)}
    assert "poor" in early and late == {"rich"}


def test_the_restricted_share_counts_the_mix_tail():
    from suanli.scheduler import TargetWorkload

    pinned = Request(cpu_milli=1000, gpu_count=1, gpu_models=frozenset({"V100"}))
    mix = TargetWorkload.from_requests([whole(1)] * 19 + [pinned], coverage=0.9)
    assert len(mix) == 1 and mix.restricted_share == 0.05


def test_packing_needs_a_fifth_restricted_or_a_restricted_mix_with_multi_gpu_work():
    from suanli.scheduler import TargetWorkload
    from suanli.scheduler.policies.suanli import packs_while_nearly_empty

    def mix(pinned: int, two_gpu: int, one_gpu: int, shares: int = 0) -> TargetWorkload:
        one = Request(cpu_milli=1000, gpu_count=1, gpu_models=frozenset({"V100"}))
        return TargetWorkload.from_requests([one] * pinned + [whole(2)] * two_gpu + [whole(1)] * one_gpu + [share(500)] * shares)

    # 100 requests, 10 of them pinned: multi-GPU milli 2*15 / (10 + 2*15 + 75) = 0.26
    assert mix(10, 15, 75).multi_gpu_share == pytest.approx(30 / 115)
    assert packs_while_nearly_empty(mix(10, 15, 75))
    assert not packs_while_nearly_empty(mix(10, 5, 85))  # multi-GPU 0.1 of the milli
    assert not packs_while_nearly_empty(mix(4, 30, 66))  # 4 % pinned
    assert packs_while_nearly_empty(mix(25, 0, 75))  # a quarter pinned
    assert not packs_while_nearly_empty(mix(0, 50, 50))  # nothing pinned
    assert mix(0, 0, 50, shares=50).multi_gpu_share == 0.0


@pytest.mark.parametrize("latch", [128, None])
def test_a_learned_gate_stays_open_once_it_opened_on_a_mix_of_enough_requests(latch):
    # The first case's cluster and pod. suanli_online learns 32 restricted requests in
    # 128 (a quarter: the gate opens), places a pod, then learns 400 unrestricted ones (the
    # gate alone shuts). Latched after 128 requests, it still plans on no mix while nearly
    # empty, so the seeded node order sends the pod to "poor" for some seed; unlatched, the
    # learned mix sends it to "rich" whatever the seed.
    from suanli.scheduler import Scheduler
    from suanli.scheduler.policies.suanli import SuanliPolicy, packs_while_nearly_empty

    pinned = Request(cpu_milli=8000, gpu_count=1, gpu_models=frozenset({"G2"}))
    plain = whole(1, cpu=8000)
    nodes = [node("poor", gpus=4, cpu=20_000), node("rich", gpus=4, cpu=40_000), node("busy", gpus=4)]
    pod = whole(1, cpu=4000)
    policy = SuanliPolicy(None, rehearse=False, pack_latch=latch)
    for req in [pinned] * 32 + [plain] * 96:
        policy.observe(req)
    assert policy.target.restricted_share == 0.25
    assert "poor" in {Scheduler(policy, cluster(*nodes), seed=s).place(pod).allocation.node for s in range(6)}
    for _ in range(400):
        policy.observe(plain)
    assert not packs_while_nearly_empty(policy.target)
    chosen = {Scheduler(policy, cluster(*nodes), seed=s).place(pod).allocation.node for s in range(6)}
    assert ("poor" in chosen) == (latch is not None)
