"""Key 5 of ``SuanliPolicy``: shares placed by the patterns of the mix's best packing
(``policies/patterns.py``), on mixes and tiny clusters worked out by hand."""

from __future__ import annotations

import pytest

from suanli.scheduler import Scheduler, TargetWorkload
from suanli.scheduler.policies.patterns import PatternBook, share_sizes, solve
from suanli.scheduler.policies.suanli import KEYS, SuanliPolicy
from tests.scheduler.factories import cluster, node, share, whole


def test_the_program_fills_gpus_whole_where_the_mix_can_and_pairs_what_cannot():
    # 500s and 250s in equal numbers pack perfectly: 375 milli per share, so 0.375 GPUs.
    perfect = solve({500: 0.5, 250: 0.5})
    assert sum(p.rate for p in perfect) == pytest.approx(0.375)
    assert all(sum(m * n for m, n in p.sizes) == 1000 for p in perfect)
    # 810s leave 190 that only a 160 fills. Only full combinations are planned (the
    # program covers each size at least), so every 810 is planned with a 160 slot.
    assert [(p.sizes, p.rate) for p in solve({810: 0.75, 160: 0.25})] == [(((810, 1), (160, 1)), pytest.approx(0.75))]


def test_the_mix_s_shares_are_its_one_gpu_requests_below_a_whole_gpu():
    mix = TargetWorkload.from_requests([share(500)] * 2 + [share(250)] + [whole(1), whole(2)], coverage=1.0)
    assert share_sizes(mix) == pytest.approx({500: 0.4, 250: 0.2})


def test_a_gpu_opened_for_a_pattern_keeps_its_slot_for_the_size_it_misses():
    state = cluster(node("a", gpus=2), node("b", gpus=2))
    book = PatternBook(solve({600: 0.5, 400: 0.5}))  # one pattern: 600 + 400
    book.placed(state, 0, 1, 600)  # a 600 opens a/GPU 1 ...
    state.bind(_alloc("a", 1, 600))
    nodes, gpus, held = book.slots(state, 400)  # ... which then waits for a 400
    assert (nodes.tolist(), gpus.tolist(), held.tolist()) == ([0], [1], [400])
    assert book.slots(state, 380)[0].tolist() == [0]  # near sizes may take it (TOLERANCE)
    assert book.slots(state, 300)[0].size == 0 and book.slots(state, 450)[0].size == 0
    book.placed(state, 0, 1, 380)
    state.bind(_alloc("a", 1, 380))
    assert book.slots(state, 400)[0].size == 0 and not book.plans  # filled: nothing waits


def test_a_slot_whose_room_other_work_took_is_forgotten():
    state = cluster(node("a", gpus=1))
    book = PatternBook(solve({600: 0.5, 400: 0.5}))
    book.placed(state, 0, 0, 600)
    state.bind(_alloc("a", 0, 600))
    state.bind(_alloc("a", 0, 300))  # placed by someone else: 100 left
    assert book.slots(state, 400)[0].size == 0 and not book.plans


def test_a_plan_whose_gpu_was_freed_is_forgotten():
    # the replay and the live loop free GPUs: a 600's GPU that waited for a 400 holds
    # nothing once the 600 ends, and is no slot (nor kept from other shares) any more
    state = cluster(node("a", gpus=1))
    book = PatternBook(solve({600: 0.5, 400: 0.5}))
    book.placed(state, 0, 0, 600)
    state.bind(_alloc("a", 0, 600))
    assert book.slots(state, 400)[0].tolist() == [0]
    state.unbind(_alloc("a", 0, 600))
    assert book.slots(state, 400)[0].size == 0 and not book.plans


def test_new_gpus_take_the_pattern_furthest_behind_its_rate():
    # 600s pair with 400s and with 300s, a quarter of the shares each: GPUs opened by
    # 600s alternate between waiting for a 400 and waiting for a 300.
    state = cluster(node("a", gpus=8))
    book = PatternBook(solve({600: 0.5, 400: 0.25, 300: 0.25}))
    assert sorted((p.sizes, round(p.rate, 6)) for p in book.patterns) == [
        (((600, 1), (300, 1)), 0.25),
        (((600, 1), (400, 1)), 0.25),
    ]
    for gpu in range(4):
        book.placed(state, 0, gpu, 600)
        state.bind(_alloc("a", gpu, 600))
    waits = [sorted(book.plans[("a", gpu)]) for gpu in range(4)]
    assert sorted(map(tuple, waits)) == [(300,), (300,), (400,), (400,)] and waits[0] != waits[1] and waits[2] != waits[3]


def test_a_share_takes_its_slot_where_fgd_would_fill_a_tighter_gap():
    # Mix: 600s and 400s. b/GPU 0 has 390 free (other work). A 600 opens a fresh GPU,
    # which then waits for a 400. A 380 arrives: in b/GPU 0 it leaves 10 where 390 were,
    # useless to both sizes (dF = -380: FGD's score 59); in the slot it leaves 20 where a
    # 400 would have gone (dF = -180: 54). FGD fills b/GPU 0; key 5 puts it in the slot,
    # which the mix's best packing keeps for a share of its size, and leaves the 390 for
    # a 400-sized share that fits there as well.
    mix = TargetWorkload.from_requests([share(600), share(400)], coverage=1.0)
    chosen = {}
    for keys in (KEYS, KEYS - {"patterns"}):
        state = cluster(node("a", gpus=2), node("b", gpus=2), used={"b": [610]})
        s = Scheduler(SuanliPolicy(mix, keys, rehearse=False), state, seed=0)
        first = s.schedule(share(600), key=1).allocation
        second = s.schedule(share(380), key=2).allocation
        chosen[keys] = (second.node, second.gpu_indices) == (first.node, first.gpu_indices)
        assert keys == KEYS or (second.node, second.gpu_indices) == ("b", (0,))
    assert chosen == {KEYS: True, KEYS - {"patterns"}: False}


def test_a_share_without_a_slot_leaves_a_gpu_that_waits_for_another_size():
    # Mix: 600s, 400s and twice as many whole GPUs. A 600 opens a GPU that waits for a
    # 400. A 300 arrives (no slot of its size): FGD puts it in that GPU's 400 (a fresh
    # GPU would lose the whole-GPU requests a GPU), leaving 100 that nothing uses; key 5
    # sends it elsewhere and keeps the 400 for a 400.
    def together(mix: list, keys: frozenset[str], nodes: int = 2) -> bool:
        target = TargetWorkload.from_requests(mix, coverage=1.0)
        state = cluster(*(node(f"n{i}", gpus=2) for i in range(nodes)))
        s = Scheduler(SuanliPolicy(target, keys, rehearse=False), state, seed=0)
        first = s.schedule(share(600), key=1).allocation
        second = s.schedule(share(300), key=2).allocation
        return (second.node, second.gpu_indices) == (first.node, first.gpu_indices)

    mix = [share(600), share(400), whole(1), whole(1)]
    assert not together(mix, KEYS) and together(mix, KEYS - {"patterns"})
    # where no other node can take it, it still goes there (a preference, not a rule)
    assert together(mix, KEYS, nodes=1)
    # shares asking for most of the mix's GPU milli (KEEP_PLANNED_SHARES): not kept
    assert together([share(600), share(400)], KEYS)


def _alloc(name: str, gpu: int, milli: int):  # noqa: ANN202
    from suanli.scheduler import Allocation

    return Allocation(name, (gpu,), milli, 0, 0)


def test_key_5_is_off_while_restricted_requests_oversubscribe_a_gpu_model():
    # 34 GPUs, 2 of them T4. T4-only whole-GPU requests asking for 10 % of the mix's GPU
    # milli want 3.4 GPUs at full arrival: T4 is oversubscribed (OVERSUBSCRIBED), and the
    # patterns are off. At 2 % they want 0.7 of T4's 2 GPUs: on.
    from suanli.scheduler import ClusterState, Request

    state = ClusterState([node(f"g{i}", gpus=8) for i in range(4)] + [node("t", gpus=2, model="T4")])
    t4_only = Request(cpu_milli=1000, memory_mib=0, gpu_count=1, gpu_models=frozenset({"T4"}))

    def keys(t4_requests: int) -> frozenset[str]:
        mix = [share(500)] * 20 + [whole(1)] * (90 - t4_requests) + [t4_only] * t4_requests
        return SuanliPolicy(TargetWorkload.from_requests(mix, coverage=1.0), rehearse=False).active_keys(state)

    assert "patterns" not in keys(10)
    assert "patterns" in keys(2)
