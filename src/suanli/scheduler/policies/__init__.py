"""Placement policies, one module each, looked up by name."""

from __future__ import annotations

from collections.abc import Callable

from suanli.scheduler.policy import Policy

from .best_fit import BestFit
from .dot_product import DotProduct
from .fgd import FGD
from .first_fit import FirstFit
from .gpu_clustering import GpuClustering
from .gpu_packing import GpuPacking
from .random import RandomPolicy
from .suanli import SuanliPolicy
from .target import TargetWorkload

__all__ = ["POLICIES", "make_policy", "TargetWorkload"]

#: name -> factory(target workload or None, seed) -> Policy
POLICIES: dict[str, Callable[[TargetWorkload | None, int], Policy]] = {
    "random": lambda target, seed: RandomPolicy(seed),
    "first_fit": lambda target, seed: FirstFit(),
    "dot_product": lambda target, seed: DotProduct(),
    "gpu_clustering": lambda target, seed: GpuClustering(),
    "gpu_packing": lambda target, seed: GpuPacking(),
    "best_fit": lambda target, seed: BestFit(),
    "fgd": lambda target, seed: FGD(target),
    "fgd_online": lambda target, seed: FGD(None),
    "suanli": lambda target, seed: SuanliPolicy(target),
    "suanli_online": lambda target, seed: SuanliPolicy(None),
}


def make_policy(name: str, target: TargetWorkload | None = None, seed: int = 0) -> Policy:
    """Build a policy by name. Policies that need a target workload and get none
    learn it online from the requests they see (``*_online``)."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}") from None
    return factory(target, seed)
