"""Loaders for the Alibaba ``openb`` GPU cluster traces (cluster-trace-gpu-v2023).

Node list columns: ``sn,cpu_milli,memory_mib,gpu,model``. Pod list columns:
``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
deletion_time,scheduled_time``. A malformed row raises ``TraceError`` naming the file,
line and field, so a bad trace is fixed in one look. What parsed cleanly is kept in
``trace_cache`` for the next run of the same file.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from suanli.scheduler import model
from suanli.scheduler.model import MILLI_PER_GPU, Node, Request
from suanli.sim.trace_cache import cached

#: the code whose output the cache holds: a change to either parses every trace again
PARSING_CODE = (__file__, model.__file__)

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(ValueError):
    def __init__(self, path: Path, line: int, field: str, message: str) -> None:
        super().__init__(f"{path}:{line}: field {field!r}: {message}")
        self.path, self.line, self.field = path, line, field


@dataclass(frozen=True)
class TracePod:
    """One pod row: the request plus the timing fields the replay uses."""

    request: Request
    creation_time: int | None
    deletion_time: int | None
    qos: str


def _rows(path: Path, required: tuple[str, ...]):
    path = Path(path)
    try:
        handle = path.open(newline="")
    except OSError as exc:
        raise TraceError(path, 0, "-", f"cannot open: {exc.strerror}") from None
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or ())]
        if missing:
            raise TraceError(path, 1, missing[0], f"missing column (header has {reader.fieldnames})")
        for row in reader:
            yield reader.line_num, row


def _optional_int(path: Path, line: int, row: dict, field: str) -> int | None:
    """``_int``, or None where the field is empty."""
    return None if (row.get(field) or "").strip() == "" else _int(path, line, row, field)


def _int(path: Path, line: int, row: dict, field: str, *, minimum: int = 0) -> int:
    raw = (row.get(field) or "").strip()
    try:
        value = int(raw)
    except ValueError:
        raise TraceError(path, line, field, f"expected an integer, got {raw!r}") from None
    if value < minimum:
        raise TraceError(path, line, field, f"must be >= {minimum}, got {value}")
    return value


def load_nodes(path: Path) -> list[Node]:
    """The nodes of a node list CSV (from the cache when this file parsed before)."""
    return cached(Path(path), "nodes", _parse_nodes, PARSING_CODE)


def _parse_nodes(path: Path) -> list[Node]:
    nodes = []
    for line, row in _rows(path, NODE_COLUMNS):
        name = (row["sn"] or "").strip()
        if not name:
            raise TraceError(Path(path), line, "sn", "empty node name")
        model = (row["model"] or "").strip()
        gpus = _int(path, line, row, "gpu")
        if gpus and not model:
            raise TraceError(Path(path), line, "model", "a node with GPUs needs a GPU model")
        nodes.append(Node(name, model, gpus, _int(path, line, row, "cpu_milli"), _int(path, line, row, "memory_mib")))
    if not nodes:
        raise TraceError(Path(path), 1, "-", "no nodes")
    return nodes


def pod_request(path: Path, line: int, row: dict) -> Request:
    """The protocol's rule: per-GPU milli = gpu_milli if in 1..1000, 1000 if above,
    and a one-GPU pod with less than 1000 milli is a shared fraction."""
    num_gpu = _int(path, line, row, "num_gpu")
    gpu_milli = _int(path, line, row, "gpu_milli")
    per_gpu = 0 if not num_gpu else min(gpu_milli, MILLI_PER_GPU)
    if num_gpu and per_gpu == 0:
        raise TraceError(Path(path), line, "gpu_milli", f"num_gpu={num_gpu} needs gpu_milli > 0")
    if num_gpu and per_gpu < MILLI_PER_GPU and num_gpu > 1:
        raise TraceError(Path(path), line, "gpu_milli", "a fraction of a GPU is only allowed with num_gpu=1")
    spec = (row.get("gpu_spec") or "").strip()
    models = frozenset(m for m in spec.split("|") if m) if num_gpu else frozenset()
    sharing = num_gpu == 1 and per_gpu < MILLI_PER_GPU
    return Request(
        cpu_milli=_int(path, line, row, "cpu_milli"),
        memory_mib=_int(path, line, row, "memory_mib"),
        gpu_count=0 if sharing else num_gpu,
        gpu_milli=per_gpu if sharing else 0,
        gpu_models=models,
        name=(row["name"] or "").strip(),
    )


def load_pods(path: Path) -> list[TracePod]:
    """The pods of a pod list CSV, in file order (from the cache when this file parsed before)."""
    return cached(Path(path), "pods", _parse_pods, PARSING_CODE)


def _parse_pods(path: Path) -> list[TracePod]:
    pods = []
    for line, row in _rows(path, POD_COLUMNS):
        if not (row["name"] or "").strip():
            raise TraceError(Path(path), line, "name", "empty pod name")
        req = pod_request(path, line, row)
        pods.append(
            TracePod(
                req,
                _optional_int(path, line, row, "creation_time"),
                _optional_int(path, line, row, "deletion_time"),
                (row.get("qos") or "").strip(),
            )
        )
    return pods
