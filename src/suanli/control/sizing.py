"""Turn what a renter asked for into a concrete, checked request.

Shared by instances and jobs: model names resolve against the registered nodes by
the one rule of ``suanli.gpu_names`` (``a100`` is the ``A100-80G`` a node registered), requests that no node could ever hold are rejected up
front (422, naming the field) instead of queueing forever, and CPU/memory get
defaults proportional to the GPU share.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from suanli import gpu_names
from suanli.control.nodes import canonical_models
from suanli.errors import Invalid

CPU_MILLI_PER_GPU = 2000
MEMORY_MIB_PER_GPU = 8192


@dataclass(frozen=True)
class Sized:
    gpu_models: list[str]
    gpu_count: int
    gpu_milli: int
    cpu_milli: int
    memory_mib: int


def size(
    session: Session,
    model: str | None,
    gpu_count: int,
    gpu_milli: int,
    cpus: float | None,
    memory_gib: float | None,
    field: str,
) -> Sized:
    """``field`` is the path used in error messages (``resources.accelerators``).
    Runs in the caller's transaction, so the check and the insert see one state."""
    if gpu_milli and gpu_count > 1:
        raise Invalid(f"{field}: gpu_milli is a share of one GPU; do not ask for {gpu_count} GPUs with it")
    models = canonical_models(session)
    chosen: list[str] = []
    if model:
        key = gpu_names.lookup(model, tuple(models))
        hit = None if key is None else models[key]
        if hit is None:
            known = ", ".join(sorted(m for m, _ in models.values())) or "none registered"
            raise Invalid(f"{field}: unknown GPU model {model!r}; available: {known}")
        name, most = hit
        if gpu_count > most:
            raise Invalid(f"{field}: {gpu_count} x {name} never fits: the largest {name} node has {most}")
        chosen = [name]
    elif gpu_count:
        most = max((m for _, m in models.values()), default=0)
        if gpu_count > most:
            raise Invalid(f"{field}: {gpu_count} GPUs never fit: the largest node has {most}")
    share = gpu_milli / 1000 if gpu_milli else float(gpu_count)
    cpu = int(cpus * 1000) if cpus else int(max(share, 0.5) * CPU_MILLI_PER_GPU)
    mem = int(memory_gib * 1024) if memory_gib else int(max(share, 0.5) * MEMORY_MIB_PER_GPU)
    return Sized(chosen, 0 if gpu_milli else gpu_count, gpu_milli, cpu, mem)
