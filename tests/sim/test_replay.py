"""Time-based replay scenarios with answers worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from suanli.cli import app
from suanli.scheduler import Node, Request
from suanli.sim.load import offered_load, scale_arrivals
from suanli.sim.replay import Replay, ReplayConfig, summary
from suanli.sim.traces import TracePod, load_nodes, load_pods

DATA = Path(__file__).parent / "data"


def pod(name: str, arrive: int, run: int, gpus: int = 1, qos: str = "LS") -> TracePod:
    return TracePod(Request(cpu_milli=1000, gpu_count=gpus, name=name), arrive, arrive + run, qos)


def nodes(n: int = 1) -> list[Node]:
    return [Node(f"n{i}", "T4", 1, 8000, 16384) for i in range(n)]


def test_second_job_waits_for_the_first():
    # One GPU; a (0..10) runs at once, b arrives at 1 and starts when a ends: delay 9 s.
    r = summary(Replay(nodes(), [pod("a", 0, 10), pod("b", 1, 10)], ReplayConfig(policy="best_fit")).run())
    assert r["queue_delay_seconds"]["on-demand"]["mean"] == pytest.approx(4.5)
    assert r["jobs_finished"] == 2


def test_spot_reclaim_after_notice_resumes_from_checkpoint():
    # spot s runs from 0 (1000 s of work); on-demand d arrives at 100: s gets a 300 s
    # notice and is evicted at 400; d starts at 400 (delay 300) and ends at 500.
    # Checkpoints every 60 s: s saved 360 s, loses 40 GPU-seconds, and resumes at 500
    # with 640 s left.
    cfg = ReplayConfig(policy="best_fit", checkpoint_interval=60, notice=300)
    sim = Replay(nodes(), [pod("s", 0, 1000, qos="BE"), pod("d", 100, 100)], cfg)
    r = summary(sim.run())
    assert r["preemptions"] == 1
    assert r["queue_delay_seconds"]["on-demand"]["mean"] == pytest.approx(300)
    assert r["lost_gpu_hours"]["preemption"] == pytest.approx(40 / 3600, abs=1e-3)
    s = sim.jobs[0]
    assert s.done and s.run == 2 and s.started is None


def test_least_lost_work_beats_lowest_priority_first():
    # Two spot jobs on two GPUs: old (started 0) and young (started 50); checkpoints
    # every 100 s. At 130 an on-demand job arrives: old has 30 s unsaved, young 80 s.
    pods = [pod("old", 0, 10_000, qos="BE"), pod("young", 50, 10_000, qos="BE"), pod("d", 130, 10)]
    lost = {}
    for strategy in ("least_lost_work", "lowest_priority_first"):
        cfg = ReplayConfig(policy="best_fit", checkpoint_interval=100, notice=0, preemption=strategy)
        lost[strategy] = Replay(nodes(2), pods, cfg).run().lost_gpu_seconds["preemption"]
    assert lost["least_lost_work"] == pytest.approx(30) and lost["lowest_priority_first"] == pytest.approx(80)


def test_fault_requeues_from_checkpoint_or_fails_without_one():
    # job runs 0..1000 on n0 (first in node order); n0 fails at 550. Checkpoints every
    # 100 s: 500 s saved, 50 s lost, resumes on n1 at 550 and ends at 1050.
    pods = [pod("j", 0, 1000)]
    sim = Replay(nodes(2), pods, ReplayConfig(policy="best_fit", checkpoint_interval=100))
    node0 = sim.scheduler.state.nodes[int(sim.scheduler.ranks.argmin())].name
    sim.inject_fault(node0, 550)
    result = sim.run()
    r = summary(result)
    assert (r["jobs_recovered"], r["jobs_failed"]) == (1, 0)
    assert result.lost_gpu_seconds["faults"] == pytest.approx(50)
    assert sim.jobs[0].alloc is None and sim.jobs[0].done
    sim = Replay(nodes(2), pods, ReplayConfig(policy="best_fit"))
    sim.inject_fault(node0, 550)
    r = summary(sim.run())
    assert (r["jobs_recovered"], r["jobs_failed"]) == (0, 1)


def test_strict_fifo_blocks_behind_the_head():
    # One 2-GPU node: a holds a GPU 0..100; wide (2 GPUs) must wait for it.
    two = [Node("big", "T4", 2, 8000, 16384)]
    pods = [pod("a", 0, 100), pod("wide", 1, 10, gpus=2), pod("small", 2, 10)]
    fifo = summary(Replay(two, pods, ReplayConfig(policy="best_fit", queue="fifo")).run())
    backfill = summary(Replay(two, pods, ReplayConfig(policy="best_fit")).run())
    # FIFO: small waits behind wide until 110 (delay 108); backfill: small starts at 2.
    assert fifo["queue_delay_seconds"]["on-demand"]["p99"] > 100
    assert backfill["queue_delay_seconds"]["on-demand"]["mean"] < fifo["queue_delay_seconds"]["on-demand"]["mean"]


def test_load_rescaling_hits_the_target_and_keeps_order():
    import numpy as np

    arrivals = np.arange(0, 1000, 10, dtype=float)
    durations = np.full(100, 50.0)
    gpus = np.ones(100)
    scaled = scale_arrivals(arrivals, durations, gpus, 0.5, 4)
    assert offered_load(scaled, durations, gpus, 4) == pytest.approx(0.5)
    assert (np.diff(scaled) > 0).all() and scaled[0] == 0


def test_replays_are_deterministic_and_the_cli_keeps_its_contract():
    n = load_nodes(DATA / "nodes_slice.csv")
    p = load_pods(DATA / "pods_slice.csv")
    cfg = ReplayConfig(policy="fgd", load=200, checkpoint_interval=900, node_mtbf=5 * 86400, seed=7)
    one, two = summary(Replay(n, p, cfg).run()), summary(Replay(n, p, cfg).run())
    one.pop("wall_seconds"), two.pop("wall_seconds")
    assert one == two and one["node_failures"] > 0
    assert one["jobs_failed"] == 0 and one["jobs_recovered"] > 0  # every checkpointed job recovers
    assert 0 < one["max_lost_seconds_per_fault"] < 900  # never more than one checkpoint interval
    out = CliRunner().invoke(
        app,
        [
            "sim",
            "replay",
            "--nodes",
            str(DATA / "nodes_slice.csv"),
            "--pods",
            str(DATA / "pods_slice.csv"),
            "--policy",
            "fgd",
            "--load",
            "200",
            "--checkpoint-interval",
            "15m",
            "--node-mtbf",
            "5d",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    r = json.loads(out.stdout)
    for key in (
        "policy",
        "load",
        "queue_delay_seconds",
        "avg_gpu_allocation",
        "preemptions",
        "lost_gpu_hours",
        "jobs_recovered",
        "jobs_failed",
        "migrations",
        "wall_seconds",
    ):
        assert key in r
    assert set(r["lost_gpu_hours"]) == {"preemption", "faults"}
    assert all({"mean", "p50", "p99"} <= set(v) for v in r["queue_delay_seconds"].values())
    bad = CliRunner().invoke(
        app,
        [
            "sim",
            "replay",
            "--nodes",
            str(DATA / "nodes_slice.csv"),
            "--pods",
            str(DATA / "pods_slice.csv"),
            "--node-mtbf",
            "soon",
        ],
    )
    assert bad.exit_code == 2 and "--node-mtbf" in bad.output


def test_migration_starts_a_whole_gpu_job_and_costs_downtime():
    # Two 1-GPU nodes. Shares a (400) and x (500) share one GPU; b (400) takes the
    # other; x ends at 5, leaving one 400-milli share per GPU. A whole-GPU job w arrives
    # at 10: without migration it waits for a to end (1000 s); with it, one share moves
    # next to the other (60 s downtime) and w starts at once.
    two = [Node("n0", "T4", 1, 8000, 16384), Node("n1", "T4", 1, 8000, 16384)]
    shares = [
        TracePod(Request(cpu_milli=1000, gpu_milli=400, name="a"), 0, 1000, "LS"),
        TracePod(Request(cpu_milli=1000, gpu_milli=500, name="x"), 1, 5, "LS"),
        TracePod(Request(cpu_milli=1000, gpu_milli=400, name="b"), 2, 1002, "LS"),
        pod("w", 10, 100),
    ]
    base = Replay(two, shares, ReplayConfig(policy="fgd"))
    plain = summary(base.run())
    assert base.jobs[3].first_start == pytest.approx(1000) and plain["migrations"] == 0
    for planner in ("direct", "repack"):
        cfg = ReplayConfig(policy="fgd", migration_moves=2, migration_planner=planner, migration_downtime=60)
        sim = Replay(two, shares, cfg)
        r = summary(sim.run())
        assert r["migrations"] == 1 and r["migration_plans"] == 1, planner
        assert sim.jobs[3].first_start == pytest.approx(10), planner
        assert r["gpu_hours_interrupted_by_migration"] == pytest.approx(60 * 0.4 / 3600, abs=1e-3)
        assert r["jobs_finished"] == 4 and r["migrations_per_hour"] > 0
        moved = next(j for j in sim.jobs if j.run == 2)
        assert moved.done
