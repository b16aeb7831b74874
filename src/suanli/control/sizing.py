"""Turn what a renter asked for into a concrete, checked request.

Shared by instances and jobs: model names resolve against the registered nodes by
the one rule of ``suanli.gpu_names`` (``a100`` is the ``A100-80G`` a node registered), requests that no node could ever hold are rejected up
front (422, naming the field) instead of queueing forever, and CPU/memory get
defaults proportional to the GPU share.

"Could it ever run" is the scheduler's own answer (``scheduler.feasibility``): its
filters and gang planner on an empty copy of the inventory. The inventory is every
registered node, cordoned and down ones included (a cordon or an outage is usually
temporary; work that fits only there waits). A request refused here names the
limit and the largest value that fits; nothing is created. Disk is not a node
figure: ``disk_gib`` is bounded by the API (``bounds.MAX_DISK_GIB``) only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from suanli import gpu_names
from suanli.billing import spot
from suanli.control import workloads
from suanli.control.capacity import to_sched_node
from suanli.control.nodes import canonical_models
from suanli.db.kept import kept
from suanli.db.models import Node
from suanli.errors import Invalid
from suanli.scheduler import ClusterState, PriorityClass, Request
from suanli.scheduler import Node as SchedNode
from suanli.scheduler.feasibility import never_fits_in

CPU_MILLI_PER_GPU = 2000
MEMORY_MIB_PER_GPU = 8192


@dataclass(frozen=True)
class Sized:
    gpu_models: list[str]
    gpu_count: int
    gpu_milli: int
    cpu_milli: int
    memory_mib: int

    def request(self, num_nodes: int = 1, priority: str = "on-demand") -> Request:
        """The scheduler's request for this size (``num_nodes`` members)."""
        return Request(
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            gpu_count=self.gpu_count,
            gpu_milli=self.gpu_milli,
            gpu_models=frozenset(self.gpu_models),
            priority=PriorityClass(priority),
            nodes=max(1, num_nodes),
        )


def inventory(session: Session) -> list[SchedNode]:
    """Every registered node, whatever its state (see the module docstring); kept while
    the catalog is unchanged (``db.kept``)."""
    return list(kept(session, "inventory", _inventory))


def _inventory(session: Session) -> tuple[SchedNode, ...]:
    return tuple(to_sched_node(n) for n in session.scalars(select(Node).order_by(Node.id)))


def empty_state(session: Session) -> ClusterState:
    """The inventory as an empty ``ClusterState``: build it once to judge many requests."""
    return ClusterState(inventory(session))


def check_fits(session: Session, sized: Sized, num_nodes: int, field: str, state: ClusterState | None = None) -> None:
    """Refuse (Invalid, naming the limit) a request no node of the inventory could
    ever hold. With no node registered at all there is nothing to judge against:
    GPU requests were refused by ``size`` already, CPU-only work waits for a node.
    ``state``: ``empty_state(session)`` when judging many (a pipeline's jobs)."""
    state = state if state is not None else empty_state(session)
    if not state.num_nodes:
        return
    why = never_fits_in(state, sized.request(num_nodes))
    if why is not None:
        raise Invalid(f"{field}: never fits this platform: {why}")


def inventory_fingerprint(session: Session) -> tuple:
    """Changes when nodes are added or removed (or their sizes change): one aggregate
    row per loop tick. Node ids are never reused, so a removal and an addition in
    the same interval still change ``max(id)`` or the count."""
    cols = (
        func.count(Node.id),
        func.min(Node.id),
        func.max(Node.id),
        func.sum(Node.gpu_count),
        func.sum(Node.cpu_milli),
        func.sum(Node.memory_mib),
    )
    return tuple(session.execute(select(*cols)).one())


def fail_never_fits(session: Session, work: Sequence) -> set[tuple[str, int]]:
    """Fail the waiting ``work`` (items with ``kind``, ``id``, ``request``,
    ``num_nodes``) that the inventory can no longer ever hold (a node removed), with
    the reason, in ``session``; returns their keys. The control loop calls it when the
    inventory changed (``inventory_fingerprint``), and on its first pass (work queued
    before this check existed). With no node registered nothing is judged."""
    nodes = inventory(session)
    if not nodes:
        return set()
    state = ClusterState(nodes)
    failed = set()
    for w in work:
        why = never_fits_in(state, replace(w.request, nodes=max(1, w.num_nodes)))
        if why is None:
            continue
        row = workloads.get(session, w.kind, w.id)
        if row is not None and row.state in ("pending", "queued") and row.launch_owner is None:
            workloads.end(session, row, "failed", f"never fits this platform: {why}")
            failed.add((w.kind, w.id))
    return failed


def check_bid_floor(session: Session, sized: Sized, num_nodes: int, bid_micros: int | None, field: str) -> None:
    """Refuse a spot bid below the spot price floor of every model it may run on: the
    price never falls below the floor, so such work would wait forever."""
    if bid_micros is None or not (sized.gpu_count or sized.gpu_milli):
        return
    mk = spot.market(session)
    floors = spot.floors(mk, sized.request(num_nodes))
    if floors and all(p > bid_micros for p in floors.values()):
        each = ", ".join(f"{m} {mk.price_text(p)}" for m, p in sorted(floors.items(), key=lambda kv: kv[1]))
        raise Invalid(
            f"{field}: your max_price {mk.text(bid_micros)} is below the spot price floor ({each} per GPU-h); "
            f"bid at least {mk.price_text(min(floors.values()))}"
        )


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
        raise Invalid(f"{field}: gpu_milli {gpu_milli} is a share of one GPU; do not ask for {gpu_count} GPUs with it")
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
