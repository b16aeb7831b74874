"""The topology-annotated spot inventory and the synthetic gang workload."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from suanli.scheduler import Node
from suanli.sim.gang_workload import generate_jobs, job_models, replay
from suanli.sim.topology_inventory import annotate, islands_for, load_spot_nodes
from suanli.sim.traces import TraceError

SPOT = Path(__file__).resolve().parents[3] / "shared" / "traces" / "alibaba-spot-2026" / "node_info_df.csv"


def test_rules_on_hand_rows():
    rows = [(str(i), "H800", 8, 192) for i in (10, 9, 100)] + [("5", "GPU-series-2", 8, 192), ("7", "A10", 1, 128)]
    nodes = {n.name: n for n in annotate(rows)}
    assert nodes["9"].memory_mib == 192 * 4096 and nodes["9"].cpu_milli == 192_000
    assert nodes["9"].nvlink_islands == () and nodes["5"].nvlink_islands == ((0, 1, 2, 3), (4, 5, 6, 7))
    # Numeric name order within (model, GPUs): 9, 10, 100 -> one leaf (3 < 16 nodes).
    assert {nodes[n].ib_leaf for n in ("9", "10", "100")} == {"H800/8g/leaf00"}
    assert nodes["7"].ib_leaf == "A10/1g/leaf00"


def test_leaves_hold_sixteen_multi_gpu_nodes_in_name_order():
    rows = [(str(i), "A100-SXM4-80GB", 8, 128) for i in range(40)]
    leaves = Counter(n.ib_leaf for n in annotate(rows))
    # 40 nodes -> 16 + 16 + 8.
    assert sorted(leaves.values(), reverse=True) == [16, 16, 8]
    assert annotate(rows)[15].ib_leaf.endswith("leaf00") and annotate(rows)[16].ib_leaf.endswith("leaf01")


def test_islands_rule():
    assert islands_for("A800-SXM4-80GB", 8) == ()
    assert islands_for("GPU-series-1", 8) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert islands_for("GPU-series-1", 4) == ()


def test_bad_rows_name_the_field(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text("gpu_model,gpu_capacity_num,cpu_num,node_name\nA10,x,128,1\n")
    with pytest.raises(TraceError, match="gpu_capacity_num"):
        load_spot_nodes(path)


@pytest.mark.skipif(not SPOT.exists(), reason="shared spot trace not present")
def test_spot_inventory_counts():
    nodes = load_spot_nodes(SPOT)
    assert len(nodes) == 4278
    assert Counter(n.gpu_model for n in nodes) == {
        "A10": 2494,
        "GPU-series-1": 989,
        "A100-SXM4-80GB": 432,
        "H800": 219,
        "GPU-series-2": 122,
        "A800-SXM4-80GB": 22,
    }
    leaves = Counter(n.ib_leaf for n in nodes)
    assert max(leaves.values()) == 32
    assert all(c <= 16 for leaf, c in leaves.items() if "/1g/" not in leaf)
    # A100: 432 nodes = 27 full leaves of 16.
    assert sum(1 for leaf in leaves if leaf.startswith("A100")) == 27
    assert len(load_spot_nodes(SPOT, min_gpus=4)) == 432 + 22 + 219 + 122 + 77 + 10


def small_inventory() -> list[Node]:
    rows = [(str(i), "A100-SXM4-80GB", 8, 128) for i in range(48)] + [(str(100 + i), "GPU-series-2", 8, 192) for i in range(16)]
    return annotate(rows)


def test_job_models_weighted_by_gpus():
    models, p = job_models(small_inventory())
    assert models == ["A100-SXM4-80GB", "GPU-series-2"] and p.tolist() == [0.75, 0.25]  # 48 : 16 nodes


def test_workload_is_deterministic_for_a_seed():
    a = generate_jobs(small_inventory(), 200, seed=3)
    assert a == generate_jobs(small_inventory(), 200, seed=3)
    assert a != generate_jobs(small_inventory(), 200, seed=4)
    assert all(j.request.gpu_models and j.request.gpu_count <= 8 for j in a)


def test_replay_arms_on_a_small_cluster():
    nodes = small_inventory()
    jobs = generate_jobs(nodes, 400, load=0.8, seed=1)
    aware = replay(nodes, jobs, "best_fit", topology_aware=True, seed=1)
    blind = replay(nodes, jobs, "best_fit", topology_aware=False, seed=1)
    assert aware.jobs == blind.jobs == 400
    assert aware.gangs and blind.gangs
    assert aware.one_leaf_share >= blind.one_leaf_share
    # Every single-node multi-GPU job fits one island when the planner chooses GPUs here:
    # island-aware picks never split a job that fits one island.
    assert aware.one_island_share >= blind.one_island_share
    again = replay(nodes, jobs, "best_fit", topology_aware=True, seed=1)
    assert (again.gangs, again.gangs_one_leaf, again.rejected) == (aware.gangs, aware.gangs_one_leaf, aware.rejected)
