"""The fill experiment's arrival order, metrics and an end-to-end CLI run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from suanli.cli import app
from suanli.scheduler import Request
from suanli.sim.fill import FillRun, arrival_order, run_fill
from suanli.sim.metrics import alloc_ratio
from suanli.sim.traces import load_nodes, load_pods

DATA = Path(__file__).parent / "data"


def reqs(*millis: int) -> list[Request]:
    return [Request(cpu_milli=1, gpu_milli=m, name=f"p{i}") for i, m in enumerate(millis)]


def test_inflation_stops_at_first_clone_over_target():
    # capacity 1000, tune 1.3 -> target 1300. Originals total 900; clones are added while
    # total + clone milli <= 1300, and the first clone that would pass it stops inflation.
    order = arrival_order(reqs(300, 600), 1000, 1.3, seed=1)
    total = sum(r.total_gpu_milli for r in order)
    assert 1300 - 600 < total <= 1300 and sorted(order[:2], key=lambda r: r.name) == reqs(300, 600)
    assert arrival_order(reqs(300, 600), 1000, 1.3, seed=1) == order  # deterministic


def test_trimming_when_the_trace_asks_for_more():
    order = arrival_order(reqs(*[500] * 10), 1000, 1.3, seed=2)
    assert sum(r.total_gpu_milli for r in order) == 1000  # 1300 would need 2.6 pods: trims to 2


def test_alloc_ratio_binning_falls_back_to_neighbours():
    run = FillRun(
        "x",
        0,
        1.3,
        1000,
        used=np.array([100, 300, 300]),
        arrived=np.array([100, 300, 400]),
        frag=np.zeros(3),
        idle=np.array([900, 700, 700]),
    )
    ratio = alloc_ratio(run)
    assert ratio["10"] == 10.0 and ratio["30"] == 30.0 and ratio["40"] == 30.0
    assert ratio["11"] == 10.0  # no sample at 11 %: mean of samples within +-1 (10 %)
    assert "20" not in ratio  # nothing within +-1 of 20 %


def test_fill_on_a_trace_slice_places_and_accounts_every_pod():
    nodes = load_nodes(DATA / "nodes_slice.csv")
    pods = [p.request for p in load_pods(DATA / "pods_slice.csv")]
    run = run_fill(nodes, pods, "fgd", seed=42)
    placed = run.pods - sum(run.failed.values())
    assert placed > 0.7 * run.pods
    assert run.used[-1] <= run.total_gpu_milli and (np.diff(run.arrived) >= 0).all()
    assert run.arrived[-1] >= 1.29 * run.total_gpu_milli - 1000


def test_cli_fill_json_and_compare(tmp_path):
    runner = CliRunner()
    args = ["--nodes", str(DATA / "nodes_slice.csv"), "--pods", str(DATA / "pods_slice.csv")]
    plot = tmp_path / "fill.png"
    out = runner.invoke(app, ["sim", "fill", *args, "--policy", "fgd", "--seed", "42", "--json", "--plot", str(plot)])
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout)
    for key in ("policy", "seed", "tune", "total_gpus", "alloc_ratio", "frag_ratio", "failed_pods", "wall_seconds"):
        assert key in result
    assert result["total_gpus"] == sum(n.gpu_count for n in load_nodes(DATA / "nodes_slice.csv"))
    assert 0 < result["alloc_ratio"]["100"] <= 100 and plot.stat().st_size > 10_000
    cmp_plot = tmp_path / "cmp.png"
    out = runner.invoke(
        app, ["sim", "compare", *args, "--policies", "best_fit,fgd", "--seeds", "42-43", "--plot", str(cmp_plot), "--json"]
    )
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)["policies"]
    assert set(rows) == {"best_fit", "fgd"} and cmp_plot.exists()


def test_cli_rejects_bad_input_clearly(tmp_path):
    runner = CliRunner()
    args = ["--nodes", str(DATA / "nodes_slice.csv"), "--pods", str(DATA / "pods_slice.csv")]
    out = runner.invoke(app, ["sim", "fill", *args, "--policy", "nope"])
    assert out.exit_code == 2 and "unknown policy 'nope'" in out.output
    bad = tmp_path / "bad.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,x,0\n")
    out = runner.invoke(app, ["sim", "fill", "--nodes", args[1], "--pods", str(bad)])
    assert out.exit_code == 2 and "bad.csv:2: field 'num_gpu'" in out.output
    out = runner.invoke(app, ["sim", "compare", *args, "--seeds", "9-1"])
    assert out.exit_code == 2 and "--seeds" in out.output


def test_cli_fill_with_defragmentation_reports_moves():
    args = ["--nodes", str(DATA / "nodes_slice.csv"), "--pods", str(DATA / "pods_slice.csv")]
    out = CliRunner().invoke(app, ["sim", "fill", *args, "--policy", "random", "--defrag-moves", "4", "--json"])
    assert out.exit_code == 0, out.output
    moved = json.loads(out.stdout)["migrations"]
    plain = json.loads(CliRunner().invoke(app, ["sim", "fill", *args, "--policy", "random", "--json"]).stdout)
    assert plain["migrations"] == 0 and moved > 0  # random placement fragments: the planner has work
    bad = CliRunner().invoke(app, ["sim", "fill", *args, "--defrag-moves", "-1"])
    assert bad.exit_code == 2 and "--defrag-moves" in bad.output


def test_cli_fill_with_the_repack_planner():
    args = ["--nodes", str(DATA / "nodes_slice.csv"), "--pods", str(DATA / "pods_slice.csv")]
    out = CliRunner().invoke(
        app, ["sim", "fill", *args, "--policy", "random", "--defrag-moves", "4", "--planner", "repack", "--json"]
    )
    assert out.exit_code == 0, out.output
    r = json.loads(out.stdout)
    assert r["migrations"] > 0 and 0 < r["migration_plans"] <= r["migrations"] and r["migrated_gpu_milli"] > 0
    bad = CliRunner().invoke(app, ["sim", "fill", *args, "--defrag-moves", "4", "--planner", "magic"])
    assert bad.exit_code == 2 and "--planner" in bad.output
