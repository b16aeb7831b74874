"""Parsers on JSON captured from the real Slurm 22.05.8 test cluster (tests/slurm/data/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suanli.backends.slurm.model import ExitStatus, Gres, NodeHealth
from suanli.backends.slurm.parse import (
    SlurmParseError,
    expand_hostlist,
    latest_runs,
    parse_gres_item,
    parse_index_list,
    parse_node_gres,
    parse_sacct,
    parse_sbatch_parsable,
    parse_sinfo,
    parse_squeue,
    parse_tres,
    split_gres,
)

DATA = Path(__file__).parent / "data"


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("node1", ("node1",)),
        ("node[1-3]", ("node1", "node2", "node3")),
        ("node[1,3-4],gpu7", ("node1", "node3", "node4", "gpu7")),
        ("n[08-10]", ("n08", "n09", "n10")),
        ("", ()),
    ],
)
def test_expand_hostlist(expr: str, expected: tuple[str, ...]) -> None:
    assert expand_hostlist(expr) == expected


def test_bad_hostlist_is_refused() -> None:
    with pytest.raises(SlurmParseError):
        expand_hostlist("node[a-b]")


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("gpu:h100:4", ("gpu", "h100", 4, ())),
        ("gpu:a100:2(IDX:0-1)", ("gpu", "a100", 2, (0, 1))),
        ("shard:5(IDX:0)", ("shard", None, 5, (0,))),
        ("gres:gpu:a100:2", ("gpu", "a100", 2, ())),
        ("gpu:h100:0(IDX:N/A)", ("gpu", "h100", 0, ())),
        ("gpu", ("gpu", None, 1, ())),
        ("gpu:h100:2(S:0-1)", ("gpu", "h100", 2, ())),
    ],
)
def test_parse_gres_item(item: str, expected: tuple) -> None:
    assert parse_gres_item(item) == expected


def test_split_gres_keeps_commas_inside_index_lists() -> None:
    assert split_gres("gpu:a100:3(IDX:0,2-3),shard:a100:0(IDX:N/A)") == [
        "gpu:a100:3(IDX:0,2-3)",
        "shard:a100:0(IDX:N/A)",
    ]
    assert parse_index_list("0,2-3") == (0, 2, 3)
    assert split_gres("(null)") == []


def test_node_gres_joins_totals_with_use() -> None:
    gres = parse_node_gres("gpu:h100:4,shard:h100:40", "gpu:h100:1(IDX:2),shard:h100:0(IDX:N/A)")
    assert gres == (
        Gres("gpu", "h100", 4, used=1, used_indices=(2,)),
        Gres("shard", "h100", 40, used=0, used_indices=()),
    )


def test_parse_tres_converts_memory_to_mib() -> None:
    assert parse_tres("cpu=16,mem=62.50G,billing=16,gres/gpu=4,gres/gpu:h100=4,gres/shard=40") == {
        "cpu": 16,
        "mem": 64000,
        "billing": 16,
        "gres/gpu": 4,
        "gres/gpu:h100": 4,
        "gres/shard": 40,
    }
    assert parse_tres(None) == {}


def test_sinfo_nodes_with_typed_gpus_and_shards_in_use() -> None:
    nodes = parse_sinfo(load("sinfo-shards-in-use.json"))
    assert [n.name for n in nodes] == ["node1", "node2", "node3", "node4"]
    node1 = nodes[0]
    assert node1.gpus() == {"h100": 4} and node1.gpu_count == 4
    assert node1.shard_count == 40 and node1.shards_per_gpu == 10
    assert node1.shards_used == 10  # two jobs of 5 shards on GPU 0
    assert node1.state == "mixed" and node1.health == NodeHealth.UP
    assert (node1.cpus, node1.alloc_cpus, node1.memory_mb, node1.alloc_memory_mb) == (16, 2, 64000, 2048)
    assert node1.partitions == ("main", "spot")
    assert nodes[2].gpus() == {"a100": 4}


def test_sinfo_down_and_drained_nodes() -> None:
    nodes = {n.name: n for n in parse_sinfo(load("sinfo-down-drain.json"))}
    assert nodes["node4"].health == NodeHealth.DOWN and nodes["node4"].reason == "suanli test"
    assert nodes["node3"].health == NodeHealth.DRAINING and nodes["node3"].flags == ("DRAIN",)
    assert nodes["node1"].health == NodeHealth.UP


def test_sinfo_nodes_whose_slurmd_died_are_down_not_responding() -> None:
    # captured with node2's slurmd killed (SlurmdTimeout passed: DOWN) and node1's killed
    # later while it ran a job (one failed ping: still "mixed", flag only)
    nodes = {n.name: n for n in parse_sinfo(load("sinfo-not-responding.json"))}
    assert nodes["node1"].state == "mixed" and nodes["node1"].flags == ("NOT_RESPONDING",)
    assert nodes["node1"].health == NodeHealth.DOWN and nodes["node1"].down_because == "NOT_RESPONDING"
    assert nodes["node2"].health == NodeHealth.DOWN
    assert nodes["node2"].down_because == "DOWN, NOT_RESPONDING: Not responding"
    assert nodes["node3"].health == NodeHealth.UP and nodes["node3"].down_because == ""
    set_down = {n.name: n for n in parse_sinfo(load("sinfo-down-drain.json"))}
    assert set_down["node4"].down_because == "DOWN: suanli test"


def test_squeue_running_gpu_and_shard_jobs() -> None:
    jobs = {j.job_id: j for j in parse_squeue(load("squeue-gpu-and-shards.json"))}
    shard_a, shard_b, gpu = jobs[1], jobs[2], jobs[3]
    assert shard_a.state == "RUNNING" and shard_a.gpu_indices == {"node1": (0,)} == shard_b.gpu_indices
    assert shard_a.tres_per_node == "gres:shard:5"
    assert gpu.name == "myjob" and gpu.qos == "spot" and gpu.requeue
    assert gpu.node == "node3" and gpu.gpu_indices == {"node3": (0, 1)}
    assert gpu.required_nodes == ("node3",) and gpu.is_active and not gpu.is_final


def test_squeue_finished_failed_cancelled_and_requeued_jobs() -> None:
    jobs = {j.job_id: j for j in parse_squeue(load("squeue-finished-and-requeued.json"))}
    assert jobs[5].state == "FAILED" and jobs[5].exit == ExitStatus(code=3)
    assert jobs[6].state == "COMPLETED" and jobs[6].exit == ExitStatus()
    assert jobs[4].state == "CANCELLED" and jobs[4].exit.signal == 15
    spot = jobs[8]  # preempted by QOS, requeued: pending again, no node
    assert (spot.state, spot.reason, spot.restarts, spot.nodes) == ("PENDING", "BeginTime", 1, ())
    assert jobs[9].gpu_indices == {"node2": (0,)}
    assert all(j.is_final for j in jobs.values() if j.state in ("COMPLETED", "FAILED", "CANCELLED"))


def test_sacct_keeps_every_run_and_latest_runs_picks_the_newest() -> None:
    records = parse_sacct(load("sacct-mixed.json"))
    runs_of_3 = [r for r in records if r.job_id == 3]
    assert [r.state for r in runs_of_3] == ["NODE_FAIL", "CANCELLED"]
    assert [r.nodes for r in runs_of_3] == [("node3",), ("node4",)]
    latest = latest_runs(records)
    assert latest[3].state == "CANCELLED" and latest[3].exit.signal == 15
    assert latest[8].state == "PREEMPTED" and latest[8].qos == "spot"


def test_unknown_schema_is_refused_loudly() -> None:
    doc = load("squeue-gpu-and-shards.json")
    doc["meta"]["plugin"]["type"] = "openapi/v0.0.40"
    with pytest.raises(SlurmParseError, match="unsupported Slurm JSON schema"):
        parse_squeue(doc)
    doc = load("sinfo-down-drain.json")
    doc["errors"] = [{"error": "boom"}]
    with pytest.raises(SlurmParseError, match="boom"):
        parse_sinfo(doc)


def test_parse_sbatch_parsable() -> None:
    assert parse_sbatch_parsable("42\n") == 42
    assert parse_sbatch_parsable("42;suanli\n") == 42
    with pytest.raises(SlurmParseError):
        parse_sbatch_parsable("")


def test_exit_status_from_wait_status() -> None:
    assert ExitStatus.from_wait_status(768) == ExitStatus(code=3)
    assert ExitStatus.from_wait_status(15) == ExitStatus(signal=15)
    assert ExitStatus.from_wait_status(36608) == ExitStatus(code=143)
