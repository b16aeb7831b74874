"""This platform's GPUs as the advisor takes them: its own prices and its nodes.

The advisor is pure and sits below billing and the database, so it cannot read the
price book or the nodes itself; this module reads both (``billing.offers``, the one
source of current prices, and the registered nodes) and hands them down as plain data
(``advisor.platform.PlatformGpu``). The API's ``/v1/advise/platform`` and the console's
"On this platform" answer from it, so they say what ``suanli gpus`` and billing say.
"""

from __future__ import annotations

from suanli.advisor.platform import NodeGpus, PlatformGpu
from suanli.billing.money import MICROS
from suanli.billing.offers import offers
from suanli.control.nodes import catalog_facts, list_nodes
from suanli.db.session import Database


def platform_gpus(db: Database) -> list[PlatformGpu]:
    """Every node model the book prices and the catalog knows, with its ready nodes."""
    with db.transaction() as s:
        priced = offers(s)
    nodes: dict[str, list[NodeGpus]] = {}
    virtual: dict[str, bool] = {}
    for node, gpus in list_nodes(db):
        if node.state != "ready" or not gpus:
            continue
        nodes.setdefault(node.gpu_model, []).append(NodeGpus(len(gpus), sum(1 for g in gpus if g.used_milli == 0)))
        virtual[node.gpu_model] = virtual.get(node.gpu_model, False) or any(g.virtual for g in gpus)
    out: list[PlatformGpu] = []
    for model, o in sorted(priced.items()):
        facts = catalog_facts(model)
        if facts is None:  # the advisor cannot size a GPU its catalog lacks
            continue
        out.append(
            PlatformGpu(
                model=model,
                catalog=facts.name,
                currency=o.currency,
                per_gpu_hour={
                    "on-demand": o.on_demand_per_hour / MICROS,
                    "spot": o.spot_per_hour / MICROS,
                    "monthly": o.monthly_per_hour / MICROS,
                    "reserved": o.reserved_per_hour / MICROS,
                },
                nodes=tuple(nodes.get(model, ())),
                virtual=virtual.get(model, False),
            )
        )
    return out
