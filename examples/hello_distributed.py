"""A real data-parallel training script, started by torchrun on each node with no
distributed boilerplate: ``init_process_group()`` finds everything in the environment.

The platform starts ``run`` once per node with NNODES, NODE_RANK, NPROC_PER_NODE,
MASTER_ADDR and MASTER_PORT; torchrun starts NPROC_PER_NODE workers there and gives each
its RANK, LOCAL_RANK and WORLD_SIZE. Each worker checks the world with one all-reduce,
then trains a tiny model with DistributedDataParallel (NCCL on real GPUs, gloo on CPU or
declared GPUs) for ``$STEPS`` steps. Rank 0 saves a checkpoint after every step into
``$SUANLI_CHECKPOINT_DIR`` (``$OUT_DIR`` or ``.`` without one), so a failed-over or
reclaimed run resumes where it stopped. A spot notice (``$SUANLI_PREEMPT_DEADLINE_FILE``
not empty) is checked after every step; the workers agree on it (an all-reduce) and leave
together, checkpointed. Each worker appends what it saw to ``runs.jsonl`` there.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def noticed() -> bool:
    path = os.environ.get("SUANLI_PREEMPT_DEADLINE_FILE", "")
    try:
        return bool(path and Path(path).read_text().strip())
    except OSError:
        return False


def record(out: Path, **fields: object) -> None:
    line = (json.dumps({**fields, "at": round(time.time(), 3)}) + "\n").encode()
    fd = os.open(out / "runs.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write: the workers' lines do not interleave
    finally:
        os.close(fd)


def main() -> None:
    cuda = torch.cuda.is_available() and os.environ.get("SUANLI_VIRTUAL_GPUS") != "1"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world, local = dist.get_rank(), dist.get_world_size(), int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    out = Path(os.environ.get("SUANLI_CHECKPOINT_DIR") or os.environ.get("OUT_DIR") or ".")
    out.mkdir(parents=True, exist_ok=True)
    who = {
        "rank": rank,
        "local_rank": local,
        "world_size": world,
        "node_rank": int(os.environ["NODE_RANK"]),
        "nnodes": int(os.environ["NNODES"]),
        "nproc_per_node": int(os.environ["NPROC_PER_NODE"]),
        "master": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
        "node": os.environ.get("SUANLI_NODE_NAME", ""),
        "backend": dist.get_backend(),
        "pid": os.getpid(),
    }

    total = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(total)  # 1 + 2 + ... + world on every rank

    torch.manual_seed(0)
    model = nn.Linear(8, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ckpt, start = out / "ckpt.pt", 0
    if ckpt.exists():
        state = torch.load(ckpt, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = int(state["step"])
        who["checkpoint_world_size"] = int(state["world_size"])
    ddp = DistributedDataParallel(model, device_ids=[local] if cuda else None)
    steps, pause = int(os.environ.get("STEPS", "5")), float(os.environ.get("STEP_SECONDS", "0"))
    record(out, event="start", step=start, allreduce=total.item(), **who)
    print(
        f"rank {rank}/{world} (node {who['node_rank']}, local {local}) on {who['node']}: "
        f"all-reduce {total.item():g}, resuming at step {start}",
        flush=True,
    )

    step, stop = start, False
    while step < steps and not stop:
        g = torch.Generator().manual_seed(step * world + rank)  # each rank its own batch
        x = torch.randn(16, 8, generator=g).to(device)
        loss = nn.functional.mse_loss(ddp(x), x.sum(dim=1, keepdim=True))
        opt.zero_grad()
        loss.backward()  # DDP averages the gradients over all ranks
        opt.step()
        step += 1
        if rank == 0:
            state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "world_size": world}
            torch.save(state, out / "ckpt.pt.new")
            os.replace(out / "ckpt.pt.new", ckpt)  # a kill mid-write keeps the last whole one
            (out / "step.new").write_text(f"{step}\n")
            os.replace(out / "step.new", out / "step")  # a reader never sees it half-written
            print(f"step {step}/{steps} loss {loss.item():.4f}", flush=True)
        time.sleep(pause)
        flag = torch.tensor([1.0 if noticed() else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # after rank 0's save: all stop at a checkpoint
        stop = bool(flag.item())

    params = sum(float(p.detach().double().sum()) for p in model.parameters())
    record(out, event="notice" if stop else "done", step=step, params=params, **who)
    print(f"rank {rank} {'left at the notice' if stop else 'done'} at step {step}", flush=True)
    # every rank is done before any tears its connections down, and then none runs the
    # process group's C++ teardown: with gloo it was seen to abort a finished worker now and
    # then ("terminate called without an active exception", SIGABRT), which torchrun reports
    # as a failed run
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
