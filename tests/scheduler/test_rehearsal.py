"""Key 1 of the default policy is kept only where a rehearsal of the mix says it allocates
more (``scheduler/policies/rehearsal.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from suanli.scheduler import ClusterState, Request, TargetWorkload
from suanli.scheduler.policies import rehearsal, suanli
from suanli.scheduler.policies.suanli import SuanliPolicy
from suanli.scheduler.policies.target import TaskShape
from tests.scheduler.factories import node, share, whole

#: 2 two-GPU V100 nodes and 24 two-GPU T4 nodes: the rehearsal's half of the cluster
#: (every other node) holds one V100 node and 12 T4 nodes.
_NODES = [node(f"v100-{i}", gpus=2, model="V100") for i in range(2)] + [node(f"t4-{i}", gpus=2, model="T4") for i in range(24)]
_V100_ONLY = Request(cpu_milli=1000, gpu_count=1, gpu_models=frozenset({"V100"}))


def _policy(mix: list[Request]) -> SuanliPolicy:
    return SuanliPolicy(TargetWorkload.from_requests(mix, coverage=1.0))


def _verdict(monkeypatch, answer: bool) -> list[tuple[TargetWorkload, bool]]:
    """Every rehearsal gives ``answer``; the list fills with each one's mix and ``with_memory``."""
    calls: list[tuple[TargetWorkload, bool]] = []

    def better(nodes: object, target: TargetWorkload, make: object, with_memory: bool = False) -> bool:
        calls.append((target, with_memory))
        return answer

    monkeypatch.setattr(rehearsal, "better", better)
    return calls


def test_key_1_is_kept_where_the_rehearsal_allocates_more_with_it() -> None:
    # 1 request in 31 may only run on V100 (4 of 52 GPUs): V100's pressure is 0.42, a
    # step above T4's 0. It is too rare to move FGD's integer score, so without key 1 the
    # node order sends flexible requests to V100 too, and a V100-only request that comes
    # later finds no room; with it, they go to T4 first.
    mix = [_V100_ONLY] + [whole(1)] * 30
    policy = _policy(mix)
    assert "pressure" in policy.active_keys(ClusterState(_NODES))
    half, target, keys = _NODES[:: rehearsal.EVERY], policy.target, policy.keys
    with_it = [rehearsal.allocated(half, target, SuanliPolicy(target, keys, rehearse=False), s) for s in rehearsal.SEEDS]
    without = [
        rehearsal.allocated(half, target, SuanliPolicy(target, keys - {"pressure"}, rehearse=False), s) for s in rehearsal.SEEDS
    ]
    assert sum(with_it) > sum(without), (with_it, without)
    assert max(with_it + without) <= 26_000  # never more than the half cluster's GPUs


def test_key_1_is_dropped_where_the_rehearsal_sees_no_gain() -> None:
    # The only GPU requests may run on V100 alone: key 1 has no flexible request to steer,
    # the rehearsals allocate the same with it and without, and a tie drops it.
    policy = _policy([_V100_ONLY] + [Request(cpu_milli=2000)] * 3)
    assert "pressure" not in policy.active_keys(ClusterState(_NODES))
    # the same mix with rehearsals off keeps the key: the drop is the rehearsal's
    unrehearsed = SuanliPolicy(policy.target, rehearse=False)
    assert "pressure" in unrehearsed.active_keys(ClusterState(_NODES))


def test_a_mix_without_scarce_models_never_rehearses(monkeypatch) -> None:
    def refuse(*args: object) -> bool:
        raise AssertionError("rehearsed")

    monkeypatch.setattr(rehearsal, "better", refuse)
    assert "pressure" in _policy([whole(1)] * 8).active_keys(ClusterState(_NODES))  # pressure 0 everywhere


def test_the_online_policy_rehearses_once_when_it_has_learned_the_mix(monkeypatch) -> None:
    """``suanli_online`` keeps key 1 unrehearsed while its mix is young (a rehearsal of a
    small sample follows the sample), rehearses once at ``LEARNED_MIX_REQUESTS`` requests,
    follows the verdict, and does not rehearse again as the mix moves on."""
    verdicts = _verdict(monkeypatch, False)
    online, state = SuanliPolicy(None), ClusterState(_NODES)
    mix = [_V100_ONLY] * 2 + [whole(1)] * 18  # V100-only requests over the 5 % the learned mix cuts
    while online.online is not None and online.online.seen < suanli.LEARNED_MIX_REQUESTS - len(mix):
        for req in mix:
            online.observe(req)
    assert "pressure" in online.active_keys(state) and verdicts == []
    for req in mix:  # the mix is learned: the next pass rehearses
        online.observe(req)
    assert "pressure" not in online.active_keys(state)
    assert len(verdicts) == 1 and TaskShape.of(_V100_ONLY) in verdicts[0][0].shapes
    for req in [whole(2)] * 2000:  # the mix moves (a new target): the verdict stands
        online.observe(req)
    assert "pressure" not in online.active_keys(state) and len(verdicts) == 1


def test_a_rehearsal_is_deterministic_and_draws_from_the_whole_mix() -> None:
    # 95 % coverage cuts the rare V100-only shape from the mix FGD scores against; the
    # rehearsal draws from the whole one (``TargetWorkload.whole``).
    mix = [whole(1)] * 97 + [_V100_ONLY] * 3
    target = TargetWorkload.from_requests(mix)
    assert TaskShape.of(_V100_ONLY) not in target.shapes
    assert target.whole is not None and TaskShape.of(_V100_ONLY) in target.whole.shapes
    assert TargetWorkload.from_requests(mix, coverage=1.0).whole is None
    policy = SuanliPolicy(target, rehearse=False)
    first = rehearsal.allocated(_NODES, target.whole, policy, seed=1)
    assert first == rehearsal.allocated(_NODES, target.whole, SuanliPolicy(target, rehearse=False), seed=1)
    assert 0 < first <= 52_000


def test_a_shape_makes_a_request_of_itself() -> None:
    for req in (whole(2, cpu=3000), share(300, cpu=500), Request(cpu_milli=700), _V100_ONLY):
        shape = TaskShape.of(req)
        assert TaskShape.of(shape.request()) == shape


#: Key 6's mix: every request a share of 500 milli with 12 GiB.
_SHARES = [share(500, mem=12 * 1024)] * 8


def test_draws_with_memory_ask_for_the_mean_memory_of_their_shape() -> None:
    # 16 GiB nodes hold one 12-GiB share each when the draws carry memory, and two GPUs'
    # worth of shares (2,000 milli) when they do not.
    nodes = [node(f"n{i}", gpus=2, mem=16 * 1024) for i in range(4)]
    target = TargetWorkload.from_requests(_SHARES)
    without = rehearsal.allocated(nodes, target, SuanliPolicy(target, rehearse=False), seed=1)
    with_memory = rehearsal.allocated(nodes, target, SuanliPolicy(target, rehearse=False), seed=1, with_memory=True)
    assert (without, with_memory) == (8_000, 2_000)


def test_key_6_is_kept_on_a_mix_of_shares_only_where_its_rehearsal_with_memory_says(monkeypatch) -> None:
    asked: list[bool] = []
    for answer in (True, False):
        calls = _verdict(monkeypatch, answer)
        assert ("share_memory" in _policy(_SHARES).active_keys(ClusterState(_NODES))) is answer
        asked += [memory for _, memory in calls]
    assert asked == [True, True]
    # A mix with restricted requests rehearses key 1 and goes without key 6 (a second
    # rehearsal would not fit a fill's time); shares under the gate never rehearse it.
    calls.clear()
    assert "share_memory" not in _policy(_SHARES + [_V100_ONLY]).active_keys(ClusterState(_NODES))
    assert "share_memory" not in _policy(_SHARES + [whole(1)] * 8).active_keys(ClusterState(_NODES))
    assert True not in [memory for _, memory in calls]


def test_the_online_policy_goes_without_key_6_until_it_has_learned_the_mix(monkeypatch) -> None:
    calls = _verdict(monkeypatch, True)
    online, state = SuanliPolicy(None), ClusterState(_NODES)
    for _ in range(suanli.LEARNED_MIX_REQUESTS - 1):
        online.observe(_SHARES[0])
    assert "share_memory" not in online.active_keys(state) and calls == []
    online.observe(_SHARES[0])
    assert "share_memory" in online.active_keys(state) and [memory for _, memory in calls] == [True]


#: ``rehearsal.both`` in a fresh interpreter (one thread): each fill's process id, and the
#: interpreter's own; with ``fail``, the fill with the key dies in any process but that one.
_BOTH = """
import os, sys
from suanli.scheduler.policies import rehearsal
me, fail = os.getpid(), sys.argv[1] == "fail"

def fill(key):
    if key and fail and os.getpid() != me:
        os._exit(3)
    return os.getpid()

print(*rehearsal.both(fill), me)
"""


def _both_in_a_fresh_process(mode: str) -> list[int]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", _BOTH, mode], capture_output=True, text=True, env=env, timeout=60, check=True)
    return [int(x) for x in out.stdout.split()]


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: the fills run in turn")
def test_a_process_of_one_thread_runs_the_two_fills_at_once() -> None:
    with_key, without, me = _both_in_a_fresh_process("ok")
    assert without == me and with_key != me  # the fill with the key ran in a forked child
    # a child that dies: the parent runs its fill again and answers it
    with_key, without, me = _both_in_a_fresh_process("fail")
    assert with_key == without == me


def test_a_process_with_threads_runs_the_two_fills_in_turn() -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert rehearsal.both(lambda key: os.getpid() + key) == (os.getpid() + 1, os.getpid())
    finally:
        stop.set()
        other.join()
