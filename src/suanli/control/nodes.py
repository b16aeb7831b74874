"""Inventory: register nodes and their GPUs, list them, summarise free capacity.

Registering an inventory is all or nothing: one transaction for every node, so
a duplicate name or a bad entry leaves the database as it was.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from suanli.backends.local.nvml import DiscoveredGpu, short_model_name
from suanli.control.auth import Principal
from suanli.db import keyset
from suanli.db.kept import kept
from suanli.db.models import Event, Gpu, Node
from suanli.db.session import Database
from suanli.errors import Conflict, Invalid, NotFound
from suanli.inventory import Inventory, NodeDecl

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CatalogFacts:
    """Datasheet figures of a registered model, from the advisor's GPU catalog."""

    name: str
    vendor: str
    memory_gb: float
    bf16_tflops: float | None
    mem_bandwidth_gbps: float | None


@dataclass(frozen=True)
class GpuModelSummary:
    model: str
    virtual: bool
    total: int
    free: int
    free_milli: int
    memory_gib: float
    nodes: int
    catalog: CatalogFacts | None = None


def catalog_facts(model: str) -> CatalogFacts | None:
    """None when the catalog does not know the model (any name may be registered)."""
    try:
        from suanli.advisor.catalog import find_gpu

        g = find_gpu(model)
    except Exception:
        return None
    return CatalogFacts(g.name, g.vendor, g.memory_gb, g.bf16_tflops, g.mem_bandwidth_gbps)


def _node_row(decl: NodeDecl, gpus: list[DiscoveredGpu]) -> Node:
    count = len(gpus) if decl.discover else decl.gpu_count
    mem_mib = gpus[0].memory_mib if (decl.discover and gpus) else int(decl.gpu_memory_gib * 1024)
    node = Node(
        name=decl.name,
        zone=decl.zone,
        backend=decl.backend,
        state="ready",
        gpu_model=short_model_name(gpus[0].name) if (decl.discover and gpus) else decl.gpu_model,
        gpu_count=count,
        gpu_memory_mib=mem_mib,
        cpu_milli=int(decl.cpu_cores * 1000),
        memory_mib=int(decl.memory_gib * 1024),
        cpu_used=0,
        mem_used=0,
        nvlink_islands=decl.nvlink_islands,
        ib_leaf=decl.ib_leaf,
        labels=decl.labels,
    )
    return node


def register(
    db: Database, who: Principal | None, inventory: Inventory, discover: Callable[[], list[DiscoveredGpu]]
) -> list[Node]:
    """Add every node of ``inventory``; ``who`` None is the server bootstrapping itself."""
    if who is not None:
        who.require("admin", "operator")
    found = discover() if any(d.discover for d in inventory.nodes) else []
    for i, d in enumerate(inventory.nodes):
        if d.discover and d.backend != "local":
            raise Invalid(f"nodes.{i}.discover: only local nodes discover GPUs")
        if d.discover and not found:
            raise Invalid(f"nodes.{i}.discover: NVML found no GPU on this host")
    try:
        with db.transaction() as s:
            existing = set(s.scalars(select(Node.name).where(Node.name.in_([d.name for d in inventory.nodes]))))
            if existing:
                raise Conflict(f"nodes already registered: {', '.join(sorted(existing))}", code="exists")
            rows = []
            for d in inventory.nodes:
                node = _node_row(d, found)
                s.add(node)
                s.flush()
                if d.discover:
                    s.add_all(
                        Gpu(
                            node_id=node.id,
                            index=g.index,
                            model=node.gpu_model,
                            uuid=g.uuid,
                            memory_mib=g.memory_mib,
                            virtual=False,
                        )
                        for g in found
                    )
                else:
                    # Declared GPUs: real on cluster backends, virtual on the local one.
                    s.add_all(
                        Gpu(
                            node_id=node.id,
                            index=k,
                            model=node.gpu_model,
                            uuid="",
                            memory_mib=node.gpu_memory_mib,
                            virtual=d.backend == "local",
                        )
                        for k in range(node.gpu_count)
                    )
                rows.append(node)
            return rows
    except IntegrityError as exc:
        raise Conflict(f"could not register nodes: {exc.orig}", code="exists") from None


def set_state(db: Database, who: Principal, name: str, state: str) -> Node:
    """Cordon (no new work), mark down, or make ready again. Running work stays:
    draining and requeueing are decisions for the preemption/failure paths."""
    who.require("admin", "operator")
    if state not in ("ready", "cordoned", "down"):
        raise Invalid(f"state: expected ready, cordoned or down, got {state!r}")
    with db.transaction() as s:
        node = s.scalar(select(Node).where(Node.name == name))
        if node is None:
            raise NotFound(f"no node {name!r}")
        if node.state != state:
            s.add(Event(kind="node", object_id=node.id, from_state=node.state, to_state=state, message=f"by {who.name}"))
            node.state = state
        return node


def mark(s: Session, node_id: int, old: str, new: str, message: str) -> bool:
    """Move a node from ``old`` to ``new`` with an event, if nobody changed it meanwhile
    (the compare-and-set keeps two writers from both recording the change)."""
    res = s.execute(update(Node).where(Node.id == node_id, Node.state == old).values(state=new))
    if res.rowcount != 1:  # type: ignore[attr-defined]
        return False
    s.add(Event(kind="node", object_id=node_id, from_state=old, to_state=new, message=message))
    log.warning("node %s: %s -> %s: %s", node_id, old, new, message)
    return True


def last_event_message(s: Session, node_id: int) -> str:
    """Why the node is in its state: automatic health checks undo only their own 'down'."""
    ev = s.scalar(select(Event).where(Event.kind == "node", Event.object_id == node_id).order_by(Event.id.desc()).limit(1))
    return ev.message if ev is not None else ""


def host_inventory(gpus: list[DiscoveredGpu]) -> Inventory:
    """This host as one local node with its NVML GPUs (used when real GPUs exist)."""
    import os

    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return Inventory(
        nodes=[
            NodeDecl(
                name=socket.gethostname().split(".")[0] or "localhost",
                gpu_model=short_model_name(gpus[0].name),
                gpu_count=len(gpus),
                cpu_cores=os.cpu_count() or 1,
                memory_gib=max(1.0, round(mem_gib, 1)),
                zone="local",
                discover=True,
            )
        ]
    )


def list_nodes(db: Database, page: keyset.Page | None = None) -> list[tuple[Node, list[Gpu]]]:
    """Nodes by name with their GPUs, in two queries; ``page``: one page of them
    (``db.keyset``: one node more than asked when more follow)."""
    with db.sessions() as s:
        nodes = list(s.scalars(keyset.select_page(select(Node), [Node.name, Node.id], page)))
        q = select(Gpu).order_by(Gpu.node_id, Gpu.index)
        if page is not None:
            q = q.where(Gpu.node_id.in_([n.id for n in nodes]))
        gpus: dict[int, list[Gpu]] = {}
        for g in s.scalars(q):
            gpus.setdefault(g.node_id, []).append(g)
        return [(n, gpus.get(n.id, [])) for n in nodes]


def gpu_summary(db: Database) -> list[GpuModelSummary]:
    """Catalog x free capacity: per GPU model (and virtual or not), whole GPUs in
    total and free on ready nodes, plus free milli for fractional requests; one
    statement (the GPUs with their nodes, in ``list_nodes``' order)."""
    q = (
        select(Node.id, Node.gpu_model, Node.state, Node.gpu_memory_mib, Gpu.virtual, Gpu.used_milli)
        .join(Gpu, Gpu.node_id == Node.id)
        .order_by(Node.name, Node.id, Gpu.index)
    )
    acc: dict[tuple[str, bool], dict] = {}
    with db.sessions() as s:
        for node_id, model, state, memory_mib, virtual, used_milli in s.execute(q):
            e = acc.setdefault((model, virtual), {"total": 0, "free": 0, "free_milli": 0, "mem": memory_mib, "nodes": set()})
            e["total"] += 1
            e["nodes"].add(node_id)
            if state == "ready":
                e["free"] += used_milli == 0
                e["free_milli"] += 1000 - used_milli
    return [
        GpuModelSummary(
            m, v, e["total"], e["free"], e["free_milli"], round(e["mem"] / 1024, 1), len(e["nodes"]), catalog_facts(m)
        )
        for (m, v), e in sorted(acc.items())
    ]


def canonical_models(session: Session) -> dict[str, tuple[str, int]]:
    """lower-case model -> (model as registered, most GPUs on one node); kept while the
    catalog is unchanged (``db.kept``)."""
    return dict(kept(session, "canonical_models", _canonical_models))


def _canonical_models(session: Session) -> MappingProxyType[str, tuple[str, int]]:
    out: dict[str, tuple[str, int]] = {}
    for model, count in session.execute(select(Node.gpu_model, Node.gpu_count)):
        name, most = out.get(model.lower(), (model, 0))
        out[model.lower()] = (name, max(most, count))
    return MappingProxyType(out)
