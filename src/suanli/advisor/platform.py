"""What a fitting configuration costs, and whether it can run, on *this* platform.

The catalog search (``fit.py``) answers for every GPU the datasheets know, priced at the
seed articles' market quotes: useful to compare, wrong as "what will I pay here". This
module answers the second question from what the caller passes in as plain data: the
platform's own prices (its price book, per plan) and its nodes (how many GPUs each has,
how many are free). The advisor stays pure and below billing and the database; the
API and the CLI read ``billing.offers`` and the nodes and hand them down.

A configuration runs here when its GPUs fit on one node, or, beyond one node, as a gang
of whole nodes of the largest size (the scheduler's ``nodes x gpu_count``); a count the
nodes cannot hold (32 x H100 on two 8-GPU nodes) is no answer, however cheap.
Answers are sorted by what they say they are sorted by (``SORTED_BY``): price per hour,
or the whole run's cost when training tokens were given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from suanli.advisor.errors import AdvisorError
from suanli.advisor.fit import FitOption

#: Plan names as the CLI's flags and the API take them.
PLAN_NAMES = ("on-demand", "spot", "monthly", "reserved")


def plan_name(plan: str) -> str:
    """``on_demand`` or ``On-Demand`` -> ``on-demand``; unknown plans raise with the choices."""
    name = str(plan).strip().lower().replace("_", "-")
    if name not in PLAN_NAMES:
        raise AdvisorError(f"unknown plan {plan!r}; choose one of: {', '.join(PLAN_NAMES)}")
    return name


@dataclass(frozen=True)
class NodeGpus:
    """One ready node's GPUs of a model: how many it has, how many are free now."""

    gpus: int
    free: int


@dataclass(frozen=True)
class PlatformGpu:
    """One GPU model the platform rents, as plain data."""

    model: str  # as the nodes registered it (``A100-80G``)
    catalog: str  # the catalog row it is (``A100 80GB SXM4``): ``FitOption.gpu``
    currency: str
    per_gpu_hour: dict[str, float]  # plan (``PLAN_NAMES``) -> currency units per GPU-hour
    nodes: tuple[NodeGpus, ...] = ()  # ready nodes only
    virtual: bool = False


@dataclass(frozen=True)
class PlatformAnswer:
    """A fitting configuration as this platform would rent it."""

    model: str  # node model name
    gpu: str  # catalog name
    gpus: int
    nodes: int  # nodes it spans (1: an instance on one node)
    parallelism: str
    per_gpu_bytes: float
    memory_used_fraction: float
    plan: str
    price_per_gpu_hour: float
    price_per_hour: float  # gpus x price_per_gpu_hour
    currency: str
    prices_per_hour: dict[str, float] = field(default_factory=dict)  # every plan, for the same GPUs
    free_now: bool = False  # the GPUs it needs are free now
    free: int = 0  # free GPUs of this model now
    total: int = 0  # GPUs of this model on ready nodes
    virtual: bool = False
    training_hours: float | None = None
    total_cost: float | None = None  # price_per_hour x training_hours
    rank: int = 0
    source: str = "this platform's price book"


def nodes_needed(count: int, nodes: Sequence[NodeGpus], tp: int = 1) -> int | None:
    """How many nodes ``count`` GPUs take here: 1 when one node has that many, else whole
    nodes of the largest size when enough of them exist and a tensor-parallel group of
    ``tp`` stays inside one node (TP across nodes is a slow network, not NVLink); None
    when nothing here can hold it."""
    if count <= 0 or not nodes:
        return None
    largest = max(n.gpus for n in nodes)
    if count <= largest:
        return 1
    whole = [n for n in nodes if n.gpus == largest]
    if tp > largest:
        return None
    if count % largest == 0 and count // largest <= len(whole):
        return count // largest
    return None


def free_now(count: int, nodes: Sequence[NodeGpus], tp: int = 1) -> bool:
    """Whether the GPUs are free now: one node with ``count`` free, or enough whole free
    nodes of the largest size for a gang."""
    span = nodes_needed(count, nodes, tp)
    if span is None:
        return False
    if span == 1:
        return any(n.free >= count for n in nodes)
    largest = max(n.gpus for n in nodes)
    return sum(1 for n in nodes if n.gpus == largest and n.free == largest) >= span


def sorted_by(options: Sequence[FitOption]) -> str:
    """What platform answers for these options are sorted by: the run's total cost when
    every option has a training time, else the price per hour."""
    return "total_cost" if options and all(o.training_hours for o in options) else "price_per_hour"


def on_platform(options: Sequence[FitOption], here: Sequence[PlatformGpu], plan: str = "on-demand") -> list[PlatformAnswer]:
    """The fitting options this platform can run, priced on ``plan`` from its own book,
    cheapest first (by ``sorted_by``). Models the platform has but does not price, and
    counts its nodes cannot hold, are left out: an answer says a price and a place."""
    plan = plan_name(plan)
    by_catalog: dict[str, list[PlatformGpu]] = {}
    for g in here:
        by_catalog.setdefault(g.catalog, []).append(g)
    out: list[PlatformAnswer] = []
    for o in options:
        for g in by_catalog.get(o.gpu, []):
            span = nodes_needed(o.gpus, g.nodes, o.tp)
            rate = g.per_gpu_hour.get(plan)
            if span is None or rate is None:
                continue
            per_hour = o.gpus * rate
            out.append(
                PlatformAnswer(
                    model=g.model,
                    gpu=o.gpu,
                    gpus=o.gpus,
                    nodes=span,
                    parallelism=o.parallelism,
                    per_gpu_bytes=o.per_gpu_bytes,
                    memory_used_fraction=o.memory_used_fraction,
                    plan=plan,
                    price_per_gpu_hour=rate,
                    price_per_hour=per_hour,
                    currency=g.currency,
                    prices_per_hour={p: o.gpus * r for p, r in g.per_gpu_hour.items()},
                    free_now=free_now(o.gpus, g.nodes, o.tp),
                    free=sum(n.free for n in g.nodes),
                    total=sum(n.gpus for n in g.nodes),
                    virtual=g.virtual,
                    training_hours=o.training_hours,
                    total_cost=per_hour * o.training_hours if o.training_hours else None,
                )
            )
    key = sorted_by(options)
    out.sort(key=lambda a: (getattr(a, key) if getattr(a, key) is not None else float("inf"), a.gpus, a.model))
    return [replace(a, rank=i + 1) for i, a in enumerate(out)]


__all__ = [
    "PLAN_NAMES",
    "NodeGpus",
    "PlatformAnswer",
    "PlatformGpu",
    "free_now",
    "nodes_needed",
    "on_platform",
    "plan_name",
    "sorted_by",
]
