"""The workload store: the queries and state changes instances and jobs share.

Instances and jobs are two tables with the same scheduling columns, and most of the
control plane treats them as one thing, a workload keyed by ``(kind, id)``. Phases
ask here for "the row of this key", "the owner of this allocation", "the running
work" or "this work is over", so the two kinds are told apart in one module and the
terminal transition (release the GPUs, move the state, stamp ``finished_at``) is
written once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import ColumnElement, Row, and_, exists, not_, or_, select, update
from sqlalchemy.orm import Session, aliased

from suanli.backends.base import TaskStatus
from suanli.control.capacity import ALLOCATION_COLUMNS, give_back
from suanli.control.lifecycle import INSTANCE_ACTIVE, JOB_FINAL, transition
from suanli.db.clock import utcnow
from suanli.db.models import Allocation, Instance, Job, JobDependency, Node, NodeVerifyRun

Workload = Instance | Job
Key = tuple[str, int]

MODELS: dict[str, type[Instance] | type[Job]] = {"instance": Instance, "job": Job}
MODELS_IN_ORDER: tuple[tuple[str, type[Instance] | type[Job]], ...] = (("job", Job), ("instance", Instance))


def model_of(kind: str) -> type[Instance] | type[Job]:
    return MODELS[kind]


def key_of(row: Workload) -> Key:
    return ("instance" if isinstance(row, Instance) else "job", row.id)


def get(s: Session, kind: str, wid: int) -> Workload | None:
    return cast("Workload | None", s.get(MODELS[kind], wid))


def owner_of(a: Allocation) -> Key:
    """The workload an allocation belongs to."""
    return ("job", a.job_id) if a.job_id else ("instance", a.instance_id)  # type: ignore[return-value]


def open_allocations(s: Session, kind: str, wid: int) -> list[Allocation]:
    col = Allocation.job_id if kind == "job" else Allocation.instance_id
    return list(s.scalars(select(Allocation).where(col == wid, Allocation.ended_at.is_(None))))


def running(s: Session, only: Callable[[Any], ColumnElement[bool]] | None = None) -> Iterable[tuple[str, Workload]]:
    """Running work that has tasks on a backend: jobs first, then instances, by id;
    ``only(model)``: a further condition on each model's rows."""
    for kind, model in MODELS_IN_ORDER:
        q = select(model).where(*_on_a_backend(model))
        for row in s.scalars((q if only is None else q.where(only(model))).order_by(model.id)):
            yield kind, cast(Workload, row)


def running_shares(s: Session) -> list[Row[Any]]:
    """Running single-node jobs on a share of one GPU and not under a notice, each with
    its open allocation: what migration may move (``control.migrate``). Columns, not
    rows: a large cluster runs thousands of shares, and loading them as entities cost
    more than planning their moves (bench/migration_live_cost.py)."""
    q = (
        select(
            Job.id,
            Job.priority,
            Job.gpu_models,
            Job.pin_nodes,
            Job.spec["checkpoint_dir"].as_string().label("checkpoint_dir"),
            *ALLOCATION_COLUMNS,
        )
        .join(Allocation, and_(Allocation.job_id == Job.id, Allocation.ended_at.is_(None)))
        .where(*_on_a_backend(Job), Job.gpu_milli > 0, Job.num_nodes == 1, Job.notice_deadline.is_(None))
        .order_by(Job.id)
    )
    return list(s.execute(q))


def running_tenants(s: Session) -> set[int]:
    """The tenants with running work that has tasks on a backend, without loading it."""
    out: set[int] = set()
    for _, model in MODELS_IN_ORDER:
        out.update(s.scalars(select(model.tenant_id).where(*_on_a_backend(model)).distinct()))
    return out


def _on_a_backend(model: Any) -> tuple[ColumnElement[bool], ...]:
    return model.state == "running", model.handles.is_not(None)


def end(
    s: Session, row: Workload, to: str, message: str = "", exit_code: int | None = None, ended_at: datetime | None = None
) -> None:
    """The one terminal transition: free the allocations, move ``row`` to ``to`` (a
    job also records its exit code and when it finished). ``ended_at``: when the work
    ended, if the backend said (``ended_at_of``); else now."""
    released = give_back(s, row, ended_at)
    if isinstance(row, Job):
        if exit_code is not None:
            row.exit_code = exit_code
        ends = [a.ended_at for a in released if a.ended_at is not None] if ended_at is not None else []
        row.finished_at = max(ends) if ends else utcnow()  # as its allocations end (clamped to them)
    transition(s, row, to, message)


def end_waiting(s: Session, rows: Sequence[Job], to: str, reasons: dict[int, str]) -> None:
    """``end`` for many queued jobs no launch has claimed (a pipeline's cancel): they
    hold no allocation (only a claim takes one), so nothing is given back and no query
    is made per row; one read checks that none holds one, else each goes through ``end``."""
    ids = [r.id for r in rows]
    holding: set[int] = set()
    for i in range(0, len(ids), 500):
        q = select(Allocation.job_id).where(Allocation.job_id.in_(ids[i : i + 500]), Allocation.ended_at.is_(None))
        holding |= {j for j in s.scalars(q) if j is not None}
    now = utcnow()
    for row in rows:
        if row.id in holding or row.launch_owner is not None:
            end(s, row, to, reasons[row.id])
        else:
            row.finished_at = now
            transition(s, row, to, reasons[row.id])
        row.reason = reasons[row.id]


def ended_at_of(statuses: Sequence[TaskStatus]) -> datetime | None:
    """When work whose tasks all ended did end: the last task's end, if every task's
    backend reported one (``TaskStatus.ended_at``); None (take now) otherwise."""
    ends = [st.ended_at for st in statuses]
    if not ends or any(e is None for e in ends):
        return None
    return datetime.fromtimestamp(max(e for e in ends if e is not None), UTC)


#: a dependency in one of these states fails an ``after: succeeded`` edge
DEPENDENCY_FAILED = ("failed", "cancelled")


def dependency_met(dep: Any) -> ColumnElement[bool]:
    """An edge (``JobDependency``) whose dependency ``dep`` (an alias of ``Job``) no
    longer holds its job back: it succeeded, or ended at all for ``after: finished``."""
    return or_(dep.state == "succeeded", and_(JobDependency.after == "finished", dep.state.in_(DEPENDENCY_FAILED)))


#: ``Job`` as the dependency of an edge. Made once: an alias builds a proxy of each of the
#: table's columns on first use, which made a fresh alias per query most of an idle tick.
DEPENDENCY = aliased(Job, name="dependency")


def dependencies_met() -> ColumnElement[bool]:
    """The gate of a pipeline's jobs: no edge of this job whose dependency still holds it
    back. One correlated ``NOT EXISTS`` on the edges' primary key (job_id, ...), in the
    same read as the waiting jobs: no query per job, no work per pair of jobs."""
    return _DEPENDENCIES_MET


_DEPENDENCIES_MET = not_(
    exists()
    .where(JobDependency.job_id == Job.id, DEPENDENCY.id == JobDependency.depends_on_id, not_(dependency_met(DEPENDENCY)))
    .correlate(Job)
)


def waiting(s: Session) -> list[tuple[str, Workload]]:
    """Work that asks to be placed: pending instances meant to run, queued jobs not
    cancelled and not waiting on a dependency, neither claimed by a launch."""
    insts = s.scalars(select(Instance).where(*_waiting(Instance)))
    jobs = s.scalars(select(Job).where(*_waiting(Job), dependencies_met()))
    return [("instance", r) for r in insts] + [("job", r) for r in jobs]


def served(s: Session, limit: int) -> list[Workload]:
    """The ``limit`` newest instances and jobs that do not wait to be placed now,
    oldest first: the request mix the platform has been asked to serve."""
    rows: list[Workload] = []
    for model in (Instance, Job):
        q = select(model).where(not_(and_(*_waiting(model)))).order_by(model.id.desc()).limit(limit)
        rows += s.scalars(q)
    rows.sort(key=lambda r: r.created_at)
    return rows[max(0, len(rows) - limit) :]


def _waiting(model: type[Instance] | type[Job]) -> list:
    if model is Instance:
        return [Instance.state == "pending", Instance.desired == "running", Instance.launch_owner.is_(None)]
    return [Job.state == "queued", Job.cancel_requested.is_(False), Job.launch_owner.is_(None)]


def claim(s: Session, kind: str, wid: int, owner: str) -> Workload | None:
    """Mark a waiting row as being launched by ``owner``; None if it is no longer
    waiting or another server claimed it first (the guarded UPDATE decides)."""
    model = MODELS[kind]
    guard = [model.id == wid, *_waiting(model)]
    claimed = update(model).where(*guard).values(launch_owner=owner).returning(model)
    return cast("Workload | None", s.scalars(claimed.execution_options(synchronize_session=False)).one_or_none())


def with_tasks(s: Session, only_stops: bool = False) -> list[tuple[str, Workload]]:
    """Work with tasks on a backend (running, or instances stopping); ``only_stops``:
    just the rows whose owner asked for a cancel, stop or delete."""
    jq = select(Job).where(Job.state == "running", Job.handles.is_not(None))
    iq = select(Instance).where(Instance.state.in_(("running", "stopping")), Instance.handles.is_not(None))
    if only_stops:
        jq = jq.where(Job.cancel_requested.is_(True))
        iq = iq.where((Instance.state == "stopping") | (Instance.desired != "running"))
    return [("job", r) for r in s.scalars(jq)] + [("instance", r) for r in s.scalars(iq)]


def launching(s: Session) -> list[tuple[str, Workload]]:
    """Rows a launch has claimed (``launch_owner`` set)."""
    return [("job", r) for r in s.scalars(select(Job).where(Job.launch_owner.is_not(None)))] + [
        ("instance", r) for r in s.scalars(select(Instance).where(Instance.launch_owner.is_not(None)))
    ]


def loop_has_work(s: Session) -> bool:
    """A job that has not ended, an instance waiting, running or stopping, or a node's
    verification run waiting for its job, in one small read. Without any of these a tick's
    phases after health have nothing to do (``ControlLoop.tick``)."""
    checks = (
        exists().where(Job.state.notin_(JOB_FINAL)),
        exists().where(Instance.state.in_(INSTANCE_ACTIVE)),
        exists().where(NodeVerifyRun.state == "waiting"),
    )
    return bool(s.scalar(select(or_(*checks))))


def reclaim_due(s: Session) -> bool:
    """A node is down, spot work runs (a victim to notice), or running work is under a
    notice (spot reclaim or funds): the reclaim phases' gate, in one small read."""
    checks = [exists().where(Node.state == "down")]
    for model in (Job, Instance):
        running = model.state == "running"
        checks += [exists().where(running, model.priority == "spot"), exists().where(running, model.notice_deadline.is_not(None))]
    return bool(s.scalar(select(or_(*checks))))


def active_of_tenant(s: Session, tenant_id: int) -> list[Key]:
    """A tenant's work that runs or wants to: what a hard cap stops."""
    insts = s.scalars(
        select(Instance.id).where(
            Instance.tenant_id == tenant_id, Instance.state.in_(("pending", "running")), Instance.desired == "running"
        )
    )
    jobs = s.scalars(select(Job.id).where(Job.tenant_id == tenant_id, Job.state.in_(("queued", "running"))))
    return [("instance", i) for i in insts] + [("job", j) for j in jobs]
