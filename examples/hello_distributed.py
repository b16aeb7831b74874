"""A stand-in for a torchrun-style training script: no distributed boilerplate,
everything comes from the variables the platform injects.

Each node's process records who it is (rank, world size, master address, GPUs)
into ``$OUT_DIR`` (default: the job's checkpoint directory), "trains" for
``$STEPS`` steps and checkpoints its step, so a requeued run resumes where it
stopped. The platform gives each node NNODES, NODE_RANK, NPROC_PER_NODE,
MASTER_ADDR and MASTER_PORT: what torchrun needs to start the node's workers.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

VARS = ("NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES")


def main() -> None:
    env = {k: os.environ.get(k, "") for k in VARS}
    suanli = {k: v for k, v in os.environ.items() if k.startswith("SUANLI_") and k not in ("SUANLI_NODE_IPS",)}
    out = Path(os.environ.get("OUT_DIR") or os.environ.get("SUANLI_CHECKPOINT_DIR") or ".")
    out.mkdir(parents=True, exist_ok=True)
    ckpt = out / f"step-rank{env['NODE_RANK']}.txt"
    start = int(ckpt.read_text()) if ckpt.exists() else 0
    steps = int(os.environ.get("STEPS", "3"))
    print(f"rank {env['NODE_RANK']}/{env['NNODES']} on {suanli.get('SUANLI_NODE_NAME')} "
          f"GPUs {env['CUDA_VISIBLE_DEVICES']} ({suanli.get('SUANLI_GPU_MODEL')}, virtual={suanli.get('SUANLI_VIRTUAL_GPUS')}) "
          f"master {env['MASTER_ADDR']}:{env['MASTER_PORT']}, resuming at step {start}", flush=True)
    for step in range(start, steps):
        time.sleep(0.1)
        ckpt.write_text(str(step + 1))
        print(f"rank {env['NODE_RANK']} step {step + 1}/{steps}", flush=True)
    (out / f"rank-{env['NODE_RANK']}.json").write_text(json.dumps({"env": env, "suanli": suanli, "steps": steps}, indent=2))
    print(f"rank {env['NODE_RANK']} done", flush=True)


if __name__ == "__main__":
    main()
