"""The inventory file format, validated with Pydantic (errors name the field path)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from suanli.bounds import MAX_GPUS, Cpus, GpuMemoryGib, MemoryGib, Text


class NodeDecl(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    gpu_model: Text = Field(min_length=1, max_length=50)
    gpu_count: int = Field(ge=0, le=MAX_GPUS)
    gpu_memory_gib: GpuMemoryGib = 0
    cpu_cores: Cpus
    memory_gib: MemoryGib
    zone: Text = Field(default="", max_length=100)
    backend: Literal["local", "slurm", "kubernetes"] = "local"
    ib_leaf: Text = Field(default="", max_length=100)
    nvlink_islands: list[list[int]] = Field(default_factory=list, max_length=MAX_GPUS)
    labels: dict[Annotated[Text, Field(max_length=100)], Annotated[Text, Field(max_length=1000)]] = Field(
        default_factory=dict, max_length=100
    )
    #: take the GPUs from NVML on this host instead of declaring them (local only)
    discover: bool = False

    @model_validator(mode="after")
    def _islands_in_range(self) -> NodeDecl:
        for group in self.nvlink_islands:
            for i in group:
                if not 0 <= i < self.gpu_count:
                    raise ValueError(f"nvlink_islands: GPU index {i} outside 0..{self.gpu_count - 1}")
        return self


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nodes: list[NodeDecl] = Field(min_length=1, max_length=10_000)

    @model_validator(mode="after")
    def _unique_names(self) -> Inventory:
        names = [n.name for n in self.nodes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate node names: {', '.join(dupes)}")
        return self


def load_inventory(path: Path) -> Inventory:
    return Inventory.model_validate(yaml.safe_load(Path(path).read_text()))


def demo_inventory() -> Inventory:
    """The demo inventory of virtual GPUs, a new copy each call (the models are mutable)."""
    return Inventory.model_validate(_demo_data())


@cache
def _demo_data() -> dict:
    """demo.yaml parsed once per process: parsing is most of the cost (about 20 ms), and
    every server started on an empty database asks for it (the test suite: hundreds)."""
    return yaml.safe_load(resources.files("suanli.inventory").joinpath("demo.yaml").read_text())
