"""Real distributed training through the platform: examples/hello-distributed.yaml's
torchrun line on the local backend (host processes), 2 nodes x 2 workers, gloo on CPU.

Each node's ``run`` starts torchrun from the per-node variables; its 4 workers all-reduce,
train a tiny model with DDP and checkpoint after every step. A node going down fails the
job over to other nodes, and a spot reclaim's notice makes the workers checkpoint and
leave together; either way the next attempt resumes from the checkpoint with the same
world size. Those two run one worker per node (``H100:1``): the platform sees nodes, not
a node's workers, and every worker imports torch (1.4 CPU-s), so this cuts a third of
their CPU in a suite that is CPU-bound (BENCHMARKS.md, issue 11). The 2 x 2 world is
checked by the third test here and on the container runtime
(tests/containers/test_container_distributed.py).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from suanli.backends.local.process import start_ticks
from suanli.control import nodes
from suanli.inventory import Inventory, NodeDecl
from tests.event_helpers import events_text
from tests.platform_helpers import ADMIN, Platform, make_platform

pytestmark = pytest.mark.torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STEPS = 8


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    """Three local nodes of two declared H100 each (SQLite: the database is not what is tested)."""
    inv = Inventory(
        nodes=[NodeDecl(name=f"local{i}", gpu_model="H100", gpu_count=2, cpu_cores=8, memory_gib=32) for i in (1, 2, 3)]
    )
    p = make_platform(tmp_path / "data", {}, inv, notice_s=20.0)
    try:
        yield p
    finally:
        p.close()


def example_task(**over: Any) -> dict[str, Any]:
    """The example's task, its script named by path (the test uploads no code), torchrun
    from this venv (the process runtime passes on only the server's PATH)."""
    task = yaml.safe_load((EXAMPLES / "hello-distributed.yaml").read_text())
    task.pop("workdir")
    task["run"] = task["run"].replace("hello_distributed.py", str(EXAMPLES / "hello_distributed.py"))
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    task["envs"] = {**task["envs"], "STEPS": STEPS, "STEP_SECONDS": "0.3", "PATH": path}
    task.update(over)
    return task


def runs(p: Platform, job: int) -> list[dict[str, Any]]:
    path = p.data_dir / "checkpoints" / f"job-{job}" / "ckpt" / "runs.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def step(p: Platform, job: int) -> int:
    path = p.data_dir / "checkpoints" / f"job-{job}" / "ckpt" / "step"
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text else 0


def attempts(p: Platform, job: int, nproc: int = 2) -> list[list[dict[str, Any]]]:
    """The workers' start records, one list (by rank) per attempt whose ``2 * nproc``
    workers have all started (an attempt whose workers are still starting is not one yet)."""
    world = 2 * nproc
    starts = [r for r in runs(p, job) if r["event"] == "start"]
    return [sorted(starts[i : i + world], key=lambda r: r["rank"]) for i in range(0, len(starts) - len(starts) % world, world)]


def check_world(attempt: list[dict[str, Any]], state: str, nproc: int = 2) -> None:
    """2 nodes x ``nproc`` workers: ranks by node, then local rank; one master; the
    all-reduce's sum 1 + 2 + ... + world; each node's workers on one node, the two apart."""
    world = 2 * nproc
    assert [(r["rank"], r["node_rank"], r["local_rank"]) for r in attempt] == [
        (node * nproc + local, node, local) for node in (0, 1) for local in range(nproc)
    ], state
    assert {(r["world_size"], r["nnodes"], r["nproc_per_node"], r["allreduce"]) for r in attempt} == {
        (world, 2, nproc, world * (world + 1) / 2)
    }, state
    assert len({r["master"] for r in attempt}) == 1 and len({r["step"] for r in attempt}) == 1, state
    first, second = {r["node"] for r in attempt[:nproc]}, {r["node"] for r in attempt[nproc:]}
    assert len(first) == len(second) == 1 and first != second, state


def state_text(p: Platform, job: int) -> str:
    log = p.data_dir / "checkpoints" / f"job-{job}" / "ckpt" / "runs.jsonl"
    return f"runs.jsonl:\n{log.read_text() if log.exists() else '(none)'}\nevents:\n{events_text(p.events('job', job))}"


def finished(p: Platform, job: int, steps: int = STEPS, world: int = 4) -> list[dict[str, Any]]:
    done = [r for r in runs(p, job) if r["event"] == "done"]
    assert len(done) == world and {r["step"] for r in done} == {steps}, state_text(p, job)
    assert len({r["params"] for r in done}) == 1, state_text(p, job)  # DDP kept every replica equal
    return done


def test_a_node_down_fails_the_job_over_and_it_resumes_from_its_checkpoint_with_the_same_world(platform: Platform) -> None:
    p = platform
    job = p.submit(**example_task(resources={"accelerators": "H100:1"}))
    p.until(lambda: step(p, job) >= 2, 60, "two steps checkpointed")
    [first] = attempts(p, job, nproc=1)
    check_world(first, state_text(p, job), nproc=1)
    down = first[1]["node"]  # node rank 1's node
    nodes.set_state(p.db, ADMIN, down, "down")
    p.until(lambda: len(attempts(p, job, nproc=1)) == 2, 60, "the job resumed on other nodes")
    seen = step(p, job)
    second = attempts(p, job, nproc=1)[1]
    check_world(second, state_text(p, job), nproc=1)
    assert down not in {r["node"] for r in second}, state_text(p, job)
    assert all(r["checkpoint_world_size"] == 2 for r in second), state_text(p, job)
    assert 2 <= second[0]["step"] <= seen < STEPS, state_text(p, job)  # from the checkpoint, not from 0
    # the first attempt's workers (in sessions of their own under torchrun) are all gone
    assert [r["pid"] for r in first if start_ticks(r["pid"]) is not None] == [], state_text(p, job)
    p.until(lambda: p.state(job, "succeeded", "failed"), 60, "the job done")
    assert p.state(job, "succeeded"), state_text(p, job)
    finished(p, job, world=2)
    states = [e.to_state for e in p.events("job", job)]
    assert states == ["queued", "running", "requeued", "queued", "running", "succeeded"], state_text(p, job)


def test_a_spot_job_checkpoints_at_its_notice_and_resumes_with_the_same_world(platform: Platform) -> None:
    p = platform
    p.only_nodes({"local1", "local2"})
    spot = p.submit(**example_task(resources={"accelerators": "H100:1", "priority": "spot"}))
    p.until(lambda: step(p, spot) >= 2, 60, "two steps checkpointed")
    check_world(attempts(p, spot, nproc=1)[0], state_text(p, spot), nproc=1)
    urgent = p.submit(name="urgent", resources={"accelerators": "H100:2"}, run="sleep 1")
    p.until(lambda: [r for r in runs(p, spot) if r["event"] == "notice"], 30, "the workers left at the notice")
    p.until(lambda: p.state(urgent, "succeeded"), 60, "the on-demand job done")
    p.until(lambda: len(attempts(p, spot, nproc=1)) == 2, 60, "the spot job resumed")
    second = attempts(p, spot, nproc=1)[1]
    check_world(second, state_text(p, spot), nproc=1)
    p.until(lambda: len([r for r in runs(p, spot) if r["event"] == "notice"]) == 2, 5, "both left")
    left = [r for r in runs(p, spot) if r["event"] == "notice"]
    assert len({r["step"] for r in left}) == 1, state_text(p, spot)  # they agreed on the step
    assert second[0]["step"] == left[0]["step"] > 0 and second[0]["checkpoint_world_size"] == 2, state_text(p, spot)
    p.until(lambda: p.state(spot, "succeeded", "failed"), 60, "the spot job done")
    assert p.state(spot, "succeeded"), state_text(p, spot)
    finished(p, spot, world=2)
    states = [e.to_state for e in p.events("job", spot)]
    assert states == ["queued", "running", "noticed", "requeued", "queued", "running", "succeeded"], state_text(p, spot)


def test_distributed_torch_starts_torchrun_itself_and_a_cpu_job_chooses_its_workers(platform: Platform) -> None:
    """``distributed: torch``: ``run`` is one worker's command. A CPU-only job (no GPUs)
    asks for 2 workers per node in its envs."""
    p = platform
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    job = p.submit(
        name="mode",
        num_nodes=2,
        resources={"cpus": 2},
        distributed="torch",
        run=f"python3 {EXAMPLES / 'hello_distributed.py'}",
        checkpoint_dir="ckpt",
        envs={"STEPS": 2, "NPROC_PER_NODE": 2, "PATH": path},
    )
    p.until(lambda: p.state(job, "succeeded", "failed"), 90, "the job done")
    assert p.state(job, "succeeded"), state_text(p, job)
    [attempt] = attempts(p, job)
    check_world(attempt, state_text(p, job))
    finished(p, job, steps=2)
