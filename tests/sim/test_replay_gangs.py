"""Gangs in the queueing replay: all-or-nothing start, reclaim of spot work on every
node a gang lacks, spot gangs reclaimed whole. Answers worked out by hand."""

from __future__ import annotations

import pytest

from suanli.clock import ManualClock
from suanli.scheduler import Node, Request
from suanli.sim.gang_workload import GangJob, generate_jobs, trace_pods
from suanli.sim.replay import Replay, ReplayConfig, summary
from suanli.sim.traces import TracePod


def nodes(n: int, gpus: int = 1) -> list[Node]:
    return [Node(f"n{i}", "H100", gpus, 64_000, 262_144, ib_leaf="leaf0") for i in range(n)]


def pod(name: str, arrive: int, run: int, nodes: int = 1, qos: str = "LS") -> TracePod:
    return TracePod(Request(cpu_milli=1000, gpu_count=1, nodes=nodes, name=name), arrive, arrive + run, qos)


def test_a_gang_starts_when_every_member_fits():
    # Two 1-GPU nodes; a holds one of them from 0 to 100; the 2-node gang g arrives at
    # 10 and waits for a: it starts at 100 (delay 90) on both nodes at once.
    sim = Replay(nodes(2), [pod("a", 0, 100), pod("g", 10, 50, nodes=2)], ReplayConfig(policy="best_fit"))
    r = summary(sim.run())
    g = sim.jobs[1]
    assert g.first_start == 100 and g.done and r["jobs_finished"] == 2
    assert r["queue_delay_seconds"]["on-demand"]["mean"] == pytest.approx(45)


def test_a_gang_reclaims_spot_work_on_every_node_it_lacks():
    # Three 1-GPU nodes: spot s1, s2 run from 0 on two of them. An on-demand 3-node gang
    # at 100 has one free node and lacks two: both spot jobs get a 300 s notice, are evicted at 400, and
    # the gang starts then. Checkpoints every 60 s: each loses 400 - 360 = 40 GPU-s.
    cfg = ReplayConfig(policy="best_fit", checkpoint_interval=60, notice=300)
    pods = [pod("s1", 0, 1000, qos="BE"), pod("s2", 0, 1000, qos="BE"), pod("g", 100, 100, nodes=3)]
    sim = Replay(nodes(3), pods, cfg)
    r = summary(sim.run())
    assert r["preemptions"] == 2
    assert sim.jobs[2].first_start == 400
    assert r["lost_gpu_hours"]["preemption"] == pytest.approx(80 / 3600, abs=1e-3)
    assert all(j.done for j in sim.jobs)


def test_no_notice_unless_the_whole_gang_can_be_made_to_fit():
    # Two 1-GPU nodes, one on-demand (never a victim) and one spot: at 100 a 2-node
    # on-demand gang could free only one node, so s is not noticed then. When od ends
    # at 500 one node is free and the other can be freed: s is noticed at 500, evicted
    # at 800, and the gang starts then.
    cfg = ReplayConfig(policy="best_fit", notice=300)
    pods = [pod("od", 0, 500), pod("s", 0, 1000, qos="BE"), pod("g", 100, 100, nodes=2)]
    sim = Replay(nodes(2), pods, cfg)
    r = summary(sim.run())
    assert r["preemptions"] == 1
    assert sim.jobs[2].first_start == 800


def test_a_spot_gang_is_reclaimed_whole():
    # A 2-node spot gang holds both nodes from 0; an on-demand 1-node job at 100 needs
    # one: the gang is noticed once, evicted whole at 400 (both members), and waits
    # to run again until both nodes are free (after d ends at 450).
    cfg = ReplayConfig(policy="best_fit", checkpoint_interval=0, notice=300)
    sim = Replay(nodes(2), [pod("sg", 0, 1000, nodes=2, qos="BE"), pod("d", 100, 50)], cfg)
    r = summary(sim.run())
    sg, d = sim.jobs
    assert r["preemptions"] == 1 and d.first_start == 400 and sg.run == 2
    # no checkpoints: 400 s lost on each of 2 GPUs; it restarts at 450 from zero
    assert r["lost_gpu_hours"]["preemption"] == pytest.approx(800 / 3600, abs=1e-3)
    assert sg.done and sg.alloc is None


def test_the_replay_drives_the_clock_it_is_given():
    clock = ManualClock()
    sim = Replay(nodes(1), [pod("a", 5, 10), pod("b", 7, 10)], ReplayConfig(policy="best_fit"), clock=clock)
    sim.run()
    assert sim.clock is clock and clock.now() == 25  # the last event: b finishes at 15 + 10
    assert sim.now == 25


def test_the_gang_workload_replays_with_preemption():
    # The synthetic gang mix, half of it spot, queued on a small topology-annotated cluster.
    inventory = [Node(f"n{i}", "H800", 8, 192_000, 786_432, ib_leaf=f"leaf{i // 4}") for i in range(16)]
    jobs: list[GangJob] = generate_jobs(inventory, 300, load=1.5, seed=1, mean_duration=600)
    pods = trace_pods(jobs, spot_share=0.5, seed=1)
    assert {p.qos for p in pods} == {"BE", "LS"} and max(p.request.nodes for p in pods) > 1
    cfg = ReplayConfig(policy="best_fit", checkpoint_interval=120, notice=60)
    sim = Replay(inventory, pods, cfg)
    r = summary(sim.run())
    assert r["jobs_finished"] == 300 and r["preemptions"] > 0
    assert sim.state.used_gpu_milli == 0 and not sim.scheduler.reservations  # every member released
    again = summary(Replay(inventory, pods, cfg).run())
    assert {k: v for k, v in again.items() if k != "wall_seconds"} == {k: v for k, v in r.items() if k != "wall_seconds"}


@pytest.mark.parametrize("planner", ["direct", "repack"])
def test_a_gang_kept_waiting_by_scattered_shares_gets_its_nodes_by_migration(planner):
    # Three 1-GPU nodes: 700-milli fillers make the 300-milli shares a, b and c land one
    # per node (each the exact fit beside its filler), then end at 6. A 2-node gang g
    # arrives at 10: without migration it waits for the shares to end at 1000; with it,
    # two shares move next to the third and g starts at once on the nodes they left.
    def share(name: str, milli: int, arrive: int, end: int) -> TracePod:
        return TracePod(Request(cpu_milli=1000, gpu_milli=milli, name=name), arrive, end, "LS")

    pods = [
        share("f0", 700, 0, 6),
        share("a", 300, 1, 1000),
        share("f1", 700, 2, 6),
        share("b", 300, 3, 1000),
        share("f2", 700, 4, 6),
        share("c", 300, 5, 1000),
        pod("g", 10, 100, nodes=2),
    ]
    base = Replay(nodes(3), pods, ReplayConfig(policy="best_fit"))
    base.run()
    assert base.jobs[6].first_start == pytest.approx(1000)
    sim = Replay(nodes(3), pods, ReplayConfig(policy="best_fit", migration_moves=4, migration_planner=planner))
    r = summary(sim.run())
    g = sim.jobs[6]
    assert g.first_start == pytest.approx(10) and r["migrations"] == 2 and r["migration_plans"] == 1
    assert r["jobs_finished"] == 7 and all(j.done for j in sim.jobs)
