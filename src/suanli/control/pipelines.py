"""Pipelines and sweeps: jobs that wait for other jobs, and jobs made from a matrix.

A pipeline is a list of tasks with names; a task's ``depends_on`` names jobs of the
same pipeline, or gives ids of the tenant's existing jobs. ``submit`` checks the whole
graph first (unknown names, another tenant's ids and cycles are refused with the field
path or the cycle's path, ``a -> b -> a``) and creates every job and edge in one
transaction: all or nothing.

Sweeps (``matrix``) are expanded, and the graph checked, by ``pipeline_plan.plan``.

The control loop gates on the edges (``workloads.waiting``: one correlated ``NOT EXISTS``
in the waiting-work read) and cancels, in the tick that sees a failure, every queued job
whose ``after: succeeded`` dependency failed or was cancelled, transitively
(``cancel_doomed``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from sqlalchemy import not_, select
from sqlalchemy.orm import Session, aliased

from suanli.control import funds, jobs, sizing, workload_secrets, workloads
from suanli.control.auth import Principal
from suanli.control.lifecycle import record_event
from suanli.control.pipeline_plan import plan
from suanli.control.secrets import Keyring
from suanli.control.task import Task
from suanli.db.models import Job, JobDependency
from suanli.db.session import Database
from suanli.errors import Invalid

#: the states in which an ``after: succeeded`` dependency dooms its dependents
FAILED = workloads.DEPENDENCY_FAILED
#: ids per ``IN (...)`` list (SQLite's old limit is 999 parameters)
CHUNK = 500


def _existing(s: Session, who: Principal, ids: set[int]) -> None:
    """Existing dependencies are this tenant's jobs (another tenant's job is refused
    exactly like a missing one: its existence is not told)."""
    found = set()
    for chunk in _chunks(sorted(ids)):
        found |= set(s.scalars(select(Job.id).where(Job.id.in_(chunk), Job.tenant_id == who.tenant_id)))
    missing = sorted(ids - found)
    if missing:
        raise Invalid(f"depends_on: no job {missing[0]} of this tenant")


# -- submitting -----------------------------------------------------------------------------
def submit(
    db: Database,
    who: Principal,
    tasks: Sequence[Task],
    group: str = "",
    data_dir: Path | None = None,
    keyring: Keyring | None = None,
) -> list[Job]:
    """Create the pipeline's jobs and edges in one transaction (nothing on any error).
    ``group``: the label its jobs are listed under, made unique with the first job's id
    (``train#12``); a pipeline or sweep without one is grouped by its first job's name."""
    made, deps = plan(tasks)
    for t in made:
        jobs.check_code(who, t, data_dir)
        if t.secrets and keyring is None:
            raise Invalid("secrets: this server holds no keyring to seal them with")
    sealed = [workload_secrets.seal(keyring, who.tenant_id, t.secret_values()) if keyring and t.secrets else {} for t in made]
    existing = {d for ds in deps for d in ds if isinstance(d, int)}
    with db.transaction() as s:
        if existing:
            _existing(s, who, existing)
        rows = []
        state = sizing.empty_state(s)  # every job is judged against one inventory
        for t, sec in zip(made, sealed, strict=True):
            row = jobs.new_row(s, who, t, sec, state)
            funds.check_start(s, row)  # refused (nothing queued) if its tenant cannot pay
            s.add(row)
            rows.append(row)
        s.flush()
        label = group or (tasks[0].name if len(made) > 1 else "")
        for row, ds in zip(rows, deps, strict=True):
            if label:
                row.group_name = f"{label[:100]}#{rows[0].id}"
            after = row.spec.get("after", "succeeded")
            ids = [rows[d[1]].id if isinstance(d, tuple) else d for d in ds]
            s.add_all(JobDependency(job_id=row.id, depends_on_id=d, after=after) for d in ids)
            waits = f" (waits for {'job' if len(ids) == 1 else 'jobs'} {', '.join(map(str, ids))} to {after[:-2]})" if ids else ""
            record_event(s, "job", row.id, None, "queued", "submitted" + waits)
        return rows


# -- the gate and the cancel ------------------------------------------------------------------
def _desc(job_id: int, name: str) -> str:
    return f"job {job_id} ({name})" if name else f"job {job_id}"


#: ``Job`` as the dependent of an edge (made once, as ``workloads.DEPENDENCY``)
_DEPENDENT = aliased(Job, name="dependent")


def cancel_doomed(s: Session) -> list[int]:
    """Cancel every queued job that waits (``after: succeeded``) on a job that failed or
    was cancelled, and those waiting on them, transitively, now; the reason names the
    dependency. Two reads when something is doomed (the doomed edges; then the queued
    jobs' edges, walked in memory), one when nothing is."""
    dep, child = workloads.DEPENDENCY, _DEPENDENT
    doomed = s.execute(
        select(JobDependency.job_id, dep.id, dep.name, dep.state)
        .join(dep, dep.id == JobDependency.depends_on_id)
        .join(child, child.id == JobDependency.job_id)
        .where(child.state == "queued", JobDependency.after == "succeeded", dep.state.in_(FAILED))
        .order_by(JobDependency.job_id, dep.id)
    ).all()
    if not doomed:
        return []
    reasons: dict[int, str] = {}
    for job_id, dep_id, dep_name, dep_state in doomed:
        reasons.setdefault(job_id, f"dependency {_desc(dep_id, dep_name)} {dep_state}")
    # the queued jobs waiting on the doomed ones, and so on: the queued jobs' edges
    waiting_on: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for job_id, dep_id, after in s.execute(
        select(JobDependency.job_id, JobDependency.depends_on_id, JobDependency.after)
        .join(child, child.id == JobDependency.job_id)
        .where(child.state == "queued")
    ):
        waiting_on[dep_id].append((job_id, after))
    names: dict[int, str] = {i: n for i, n in s.execute(select(Job.id, Job.name).where(Job.state == "queued"))}
    frontier = sorted(reasons)
    root = {j: reasons[j] for j in reasons}
    while frontier:
        nxt = []
        for j in frontier:
            for k, after in waiting_on.get(j, ()):
                if after == "succeeded" and k not in reasons:
                    reasons[k] = f"dependency {_desc(j, names.get(j, ''))} was cancelled: {root[j]}"
                    root[k] = root[j]
                    nxt.append(k)
        frontier = nxt
    rows = []
    for chunk in _chunks(sorted(reasons)):
        rows += list(s.scalars(select(Job).where(Job.id.in_(chunk), Job.state == "queued")))
    workloads.end_waiting(s, rows, "cancelled", {j: r[:2000] for j, r in reasons.items()})
    return [r.id for r in rows]


# -- what the listings show ---------------------------------------------------------------------
def _chunks(ids: Sequence[int]) -> Iterable[Sequence[int]]:
    for i in range(0, len(ids), CHUNK):
        yield ids[i : i + CHUNK]


def depends_on(s: Session, job_ids: Sequence[int]) -> dict[int, list[int]]:
    """Each job's dependencies (ids, ascending)."""
    out: dict[int, list[int]] = defaultdict(list)
    for chunk in _chunks(sorted(set(job_ids))):
        q = select(JobDependency.job_id, JobDependency.depends_on_id).where(JobDependency.job_id.in_(chunk))
        for j, d in s.execute(q.order_by(JobDependency.job_id, JobDependency.depends_on_id)):
            out[j].append(d)
    return dict(out)


def waiting_reasons(s: Session, job_ids: Sequence[int]) -> dict[int, str]:
    """Why each of these queued jobs is not yet run by its dependencies:
    ``waiting for job 12 (train) to succeed``; absent: nothing it depends on holds it."""
    dep = workloads.DEPENDENCY
    satisfied = workloads.dependency_met(dep)
    held: dict[int, list[tuple[int, str, str]]] = defaultdict(list)
    for chunk in _chunks(sorted(set(job_ids))):
        q = (
            select(JobDependency.job_id, dep.id, dep.name, JobDependency.after)
            .join(dep, dep.id == JobDependency.depends_on_id)
            .where(JobDependency.job_id.in_(chunk), not_(satisfied))
            .order_by(JobDependency.job_id, dep.id)
        )
        for j, d, name, after in s.execute(q):
            held[j].append((d, name, after))
    out = {}
    for j, ds in held.items():
        d, name, after = ds[0]
        more = f" (and {len(ds) - 1} more)" if len(ds) > 1 else ""
        out[j] = f"waiting for {_desc(d, name)} to {'succeed' if after == 'succeeded' else 'finish'}{more}"
    return out
