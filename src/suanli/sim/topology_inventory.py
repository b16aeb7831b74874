"""A topology-annotated inventory from the 2026 Alibaba spot-GPU node list.

``../shared/traces/alibaba-spot-2026/node_info_df.csv`` (columns
``gpu_model,gpu_capacity_num,cpu_num,node_name``; 4,278 nodes) has real GPU models
and node sizes but no memory, NVLink or network columns. They are added by fixed,
documented rules (docs/topology-and-defrag.md), so every experiment on this
inventory sees the same cluster:

* memory: ``cpu_num x 4 GiB`` - the most common memory per core of the openb
  GPU node list (4,096 MiB per core on 642 of its 1,213 nodes);
* NVLink islands: 8-GPU A100-SXM4-80GB, A800-SXM4-80GB and H800 nodes are HGX
  boards whose NVSwitch joins all 8 GPUs: one island of 8. The anonymised
  "GPU-series-*" 8-GPU nodes have no published board, so they are modelled as two
  islands of 4 (GPUs 0-3, 4-7), the common PCIe layout with two switches. 4-GPU
  and 1-GPU nodes are one island;
* IB leaves: nodes of one (model, GPUs per node) group, in numeric node-name
  order, fill leaves of ``LEAF_SIZE`` nodes (16 for multi-GPU nodes: 128 GPUs per
  leaf; 32 for 1-GPU nodes); the last leaf of a group takes the remainder. Leaves
  never mix models, as in a real fabric built per purchase.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from suanli.scheduler.model import Node
from suanli.sim.traces import TraceError, _int, _rows

COLUMNS = ("gpu_model", "gpu_capacity_num", "cpu_num", "node_name")
MIB_PER_CORE = 4096
#: 8-GPU boards whose NVSwitch makes one NVLink domain of all GPUs.
NVSWITCH_MODELS = frozenset({"A100-SXM4-80GB", "A800-SXM4-80GB", "H800"})


def leaf_size(gpus: int) -> int:
    """Nodes per IB leaf for nodes of ``gpus`` GPUs."""
    return 32 if gpus <= 1 else 16


def islands_for(model: str, gpus: int) -> tuple[tuple[int, ...], ...]:
    """The NVLink islands of a ``gpus``-GPU node of ``model`` (empty: one island)."""
    if gpus == 8 and model not in NVSWITCH_MODELS:
        return ((0, 1, 2, 3), (4, 5, 6, 7))
    return ()


def _name_key(name: str) -> tuple[int, int | str]:
    return (0, int(name)) if name.isdigit() else (1, name)


def annotate(rows: list[tuple[str, str, int, int]]) -> list[Node]:
    """Nodes from (name, model, gpus, cpu cores) rows, with memory, islands and
    leaves by the module's rules, in the input order."""
    groups: dict[tuple[str, int], list[str]] = defaultdict(list)
    for name, model, gpus, _ in rows:
        groups[(model, gpus)].append(name)
    leaf_of: dict[str, str] = {}
    for (model, gpus), names in groups.items():
        size = leaf_size(gpus)
        for pos, name in enumerate(sorted(names, key=_name_key)):
            leaf_of[name] = f"{model}/{gpus}g/leaf{pos // size:02d}"
    return [
        Node(
            name=name,
            gpu_model=model,
            gpu_count=gpus,
            cpu_milli=cores * 1000,
            memory_mib=cores * MIB_PER_CORE,
            nvlink_islands=islands_for(model, gpus),
            ib_leaf=leaf_of[name],
        )
        for name, model, gpus, cores in rows
    ]


def load_spot_nodes(path: Path, min_gpus: int = 0) -> list[Node]:
    """The annotated inventory; ``min_gpus`` keeps only nodes with that many GPUs
    (leaves are assigned over the whole list first, so filtering does not move a
    node to another leaf). Malformed rows raise ``TraceError``."""
    path = Path(path)
    rows = []
    for line, row in _rows(path, COLUMNS):
        name = (row["node_name"] or "").strip()
        model = (row["gpu_model"] or "").strip()
        if not name:
            raise TraceError(path, line, "node_name", "empty node name")
        if not model:
            raise TraceError(path, line, "gpu_model", "empty GPU model")
        gpus = _int(path, line, row, "gpu_capacity_num", minimum=1)
        cores = _int(path, line, row, "cpu_num", minimum=1)
        rows.append((name, model, gpus, cores))
    if not rows:
        raise TraceError(path, 1, "-", "no nodes")
    if len({r[0] for r in rows}) != len(rows):
        raise TraceError(path, 1, "node_name", "node names must be unique")
    return [n for n in annotate(rows) if n.gpu_count >= min_gpus]
