"""examples/hello-distributed.yaml on the container runtime: each node a container of the
tenant's network, torchrun in each from the per-node variables, 4 workers (gloo on CPU)
meeting at ``MASTER_ADDR`` (node 0's container, by its hostname) and at each other.

The built-in ``python`` image has no PyTorch: the test lends this venv's torch to the job
through its volume (hard links, read-only by convention: the job writes none of them)
before the job's ``setup`` lets it start.
"""

from __future__ import annotations

import json
import shutil
import site
from pathlib import Path

import pytest
import yaml

from suanli.control.launcher import job_volume
from tests.control.control_helpers import Server, wait_state

pytestmark = pytest.mark.torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: What ``import torch`` and gloo need of this venv's site-packages.
TORCH_PACKAGES = ("torch", "torchgen", "functorch", "typing_extensions.py", "sympy", "mpmath", "filelock", "networkx")
TORCH_PACKAGES += ("jinja2", "markupsafe", "fsspec", "numpy", "numpy.libs")
CONTAINER_PATH = "/workspace/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def lend_torch(volume: Path) -> None:
    """This venv's torch as ``/workspace/pylib``, a ``torchrun`` in ``/workspace/bin`` and
    the example's script in ``/workspace``."""
    import torch

    packages = Path(torch.__file__).parent.parent
    assert packages in [Path(p) for p in site.getsitepackages()], packages
    for name in TORCH_PACKAGES:
        src, dst = packages / name, volume / "pylib" / name
        if src.is_dir():
            shutil.copytree(src, dst, copy_function=_link)  # new directories: what Python writes there is the job's
        elif src.exists():
            _link(str(src), str(dst))
    (volume / "bin").mkdir()
    (volume / "bin" / "torchrun").write_text('#!/bin/sh\nexec python3 -m torch.distributed.run "$@"\n')
    (volume / "bin" / "torchrun").chmod(0o755)
    shutil.copy(EXAMPLES / "hello_distributed.py", volume)


def _link(src: str, dst: str) -> None:
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    Path(dst).hardlink_to(src)


def test_torchrun_meets_across_the_containers_of_a_two_node_job(csrv: Server) -> None:
    task = yaml.safe_load((EXAMPLES / "hello-distributed.yaml").read_text())
    task.pop("workdir")
    task["setup"] = "while [ ! -f /workspace/ready ]; do sleep 0.1; done; python3 --version"  # until torch is lent
    task["envs"] = {**task["envs"], "STEPS": 3, "PATH": CONTAINER_PATH, "PYTHONPATH": "/workspace/pylib"}
    job = csrv.post("/v1/jobs", task, expect=201).json()
    volume = job_volume(csrv.data_dir, job["id"])
    (volume / "pylib").mkdir(parents=True)
    lend_torch(volume)
    (volume / "ready").touch()
    done = wait_state(csrv, "job", job["id"], ("succeeded", "failed"), 120)
    logs = csrv.get(f"/v1/jobs/{job['id']}/logs")["text"]
    assert done["state"] == "succeeded", f"{done}\n{logs}"  # whole: torchrun's reason is at the end
    lines = (volume / "ckpt" / "runs.jsonl").read_text().splitlines()
    starts = sorted((json.loads(x) for x in lines if '"start"' in x), key=lambda r: r["rank"])
    assert [(r["rank"], r["node_rank"], r["local_rank"]) for r in starts] == [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)], lines
    assert {(r["world_size"], r["nnodes"], r["nproc_per_node"], r["allreduce"], r["backend"]) for r in starts} == {
        (4, 2, 2, 10.0, "gloo")
    }, lines
    # node 0's container by its hostname, the same for all
    assert {r["master"].split(":")[0] for r in starts} == {f"job-{job['id']}-0"}, lines
    done_ = [json.loads(x) for x in lines if '"done"' in x]
    assert len(done_) == 4 and {r["step"] for r in done_} == {3} and len({r["params"] for r in done_}) == 1, lines
