"""``suanli nodes verify NAME`` as a workload: a job pinned to the node, in its own container.

Measuring a node from an operator's shell there measures the host, not what a renter
gets. So a verification run is an ordinary job with three differences, all set here
and nowhere else (a renter's task has no field for them, ``control.task``):

- it is **pinned** to the node (``Job.pin_nodes``, ``Request.pin_nodes``) and asks for
  the **whole node**: every GPU, all CPU and memory, so it measures what a renter's
  container gets and nothing else runs there meanwhile;
- it **ignores a cordon** (``Job.ignore_cordon``): a node cordoned for failing its
  check is re-verified before it is uncordoned, while renters' work never lands there;
- its command is ``suanli verify --json`` (``--expect`` the model the node is sold as),
  its report written to ``verify-report.json`` in the job's volume (``/workspace``).

Run states: ``waiting`` (the job has not ended) -> ``recorded`` (the report was judged
and kept by ``verification.record_in``, exactly as ``--report FILE`` keeps one: history,
mark, cordon on failure, uncordon on a pass when asked) or ``failed`` (the job was
cancelled, or left no report or one that does not parse: ``error`` says which, and
nothing about the node changes). ``collect`` is the control loop's phase that moves
runs on; a run is settled in one transaction with its result, guarded by its state, so
a report is recorded once.

The job runs in the image the operator names, else the catalog's ``verify`` image
(the ``python`` image plus suanli and torch: ``suanli images build verify``), else the
default image (which must then have ``suanli`` and torch). ``suanli verify`` exits 1 when
a GPU fails: the job then fails, and its report is recorded all the same.
"""

from __future__ import annotations

import json
import logging
import shlex
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from suanli import gpu_names
from suanli.backends.base import Handle
from suanli.control import images, verification
from suanli.control.auth import Principal
from suanli.control.launcher import job_volume
from suanli.control.lifecycle import JOB_FINAL, record_event
from suanli.control.plane import Plane
from suanli.control.sizing import empty_state
from suanli.control.task import Task
from suanli.db.clock import utcnow
from suanli.db.models import Image, Job, Node, NodeVerifyRun
from suanli.db.session import Database
from suanli.errors import Conflict, Invalid, NotFound
from suanli.scheduler import PriorityClass, Request
from suanli.scheduler.feasibility import never_fits_in
from suanli.verify.judge import Thresholds

log = logging.getLogger(__name__)

#: where the job leaves its report, relative to its working directory (its volume)
REPORT_FILE = "verify-report.json"
#: the catalog image made for it (``imagebuild``'s ``verify`` recipe), used when offered
VERIFY_IMAGE = "verify"
#: bytes of the job's output quoted when it left no report
LOG_TAIL = 1500


@dataclass(frozen=True)
class RunView:
    """A run as the API shows it."""

    id: int
    node: str
    job_id: int
    job_state: str
    state: str
    error: str
    uncordon: bool
    actor: str
    verification_id: int | None


def command(model: str, quick: bool) -> str:
    """The job's command: ``suanli verify --json`` against the node's catalog model,
    its report into ``REPORT_FILE`` (the exit status is the verdict's, kept as the job's)."""
    parts = ["suanli", "verify", "--json"]
    expect = gpu_names.canonical_or_none(model)
    if expect:
        parts += ["--expect", expect]
    if quick:
        parts.append("--quick")
    return f"{shlex.join(parts)} > {REPORT_FILE}"


def pinned_request(node: Node) -> Request:
    """The whole of ``node``, pinned to it, cordon ignored."""
    return Request(
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
        gpu_count=node.gpu_count,
        gpu_models=frozenset([node.gpu_model]) if node.gpu_count else frozenset(),
        priority=PriorityClass.ON_DEMAND,
        pin_nodes=frozenset([node.name]),
        ignore_cordon=True,
    )


def _image(s: Session, name: str | None) -> str:
    """The catalog image the run uses (see the module docstring); ``Invalid`` if unknown."""
    if name:
        return images.resolve(s, name).name
    if s.scalar(select(Image.id).where(Image.name == VERIFY_IMAGE)) is not None:
        return VERIFY_IMAGE
    return images.resolve(s, None).name


def submit(
    db: Database,
    who: Principal,
    name: str,
    uncordon: bool = False,
    quick: bool = False,
    image: str | None = None,
    run: str | None = None,
) -> NodeVerifyRun:
    """Queue a verification run of node ``name`` (operators only). Refused, with nothing
    created: an unknown node (NotFound), a run of that node still waiting (Conflict), an
    unknown image or a node the request could never fit (Invalid). ``run`` replaces the
    job's command (the server's ``--verify-command``: tests stand in a recorded GPU's
    report for a physical GPU with it); it must leave ``REPORT_FILE`` like the default."""
    who.require("admin", "operator")
    with db.transaction() as s:
        node = s.scalar(select(Node).where(Node.name == name))
        if node is None:
            raise NotFound(f"no node {name!r}")
        busy = s.scalar(select(NodeVerifyRun).where(NodeVerifyRun.node_id == node.id, NodeVerifyRun.state == "waiting"))
        if busy is not None:
            raise Conflict(
                f"node {name} is being verified already (run {busy.id}, job {busy.job_id}); wait for it or cancel that job"
            )
        req = pinned_request(node)
        why = never_fits_in(empty_state(s), req)
        if why is not None:
            raise Invalid(f"node {name}: a verification job never fits: {why}")
        task = Task(name=f"verify-{name}"[:100], image=_image(s, image), run=run or command(node.gpu_model, quick))
        job = Job(
            tenant_id=who.tenant_id,
            user_id=who.user_id,
            name=task.name,
            state="queued",
            spec=task.model_dump(mode="json", exclude={"secrets"}),
            gpu_models=sorted(req.gpu_models),
            gpu_count=req.gpu_count,
            gpu_milli=0,
            cpu_milli=req.cpu_milli,
            memory_mib=req.memory_mib,
            num_nodes=1,
            priority=req.priority.value,
            pin_nodes=[name],
            ignore_cordon=True,
        )
        s.add(job)
        s.flush()
        record_event(s, "job", job.id, None, "queued", f"verification of node {name}, by {who.name}")
        row = NodeVerifyRun(node_id=node.id, job_id=job.id, actor=who.name, uncordon=uncordon, state="waiting")
        s.add(row)
        s.flush()
        return row


def _view(s: Session, row: NodeVerifyRun) -> RunView:
    node = s.get(Node, row.node_id)
    job = s.get(Job, row.job_id)
    return RunView(
        id=row.id,
        node=node.name if node else "",
        job_id=row.job_id,
        job_state=job.state if job else "",
        state=row.state,
        error=row.error,
        uncordon=row.uncordon,
        actor=row.actor,
        verification_id=row.verification_id,
    )


def view(db: Database, row: NodeVerifyRun) -> RunView:
    with db.sessions() as s:
        return _view(s, s.get(NodeVerifyRun, row.id) or row)


def get(db: Database, who: Principal, name: str, run_id: int) -> RunView:
    """Run ``run_id`` of node ``name`` (operators)."""
    who.require("admin", "operator")
    with db.sessions() as s:
        node = verification.node_named(s, name)
        row = s.get(NodeVerifyRun, run_id)
        if row is None or row.node_id != node.id:
            raise NotFound(f"no verification run {run_id} of node {name!r}")
        return _view(s, row)


def read_report(plane: Plane, job: Job) -> tuple[object | None, str]:
    """The report the job left, or None and why not (with the end of its output)."""
    path = job_volume(plane.data_dir, job.id) / REPORT_FILE
    try:
        text = path.read_text("utf-8")
    except OSError:
        text = ""
    exit_note = f"job {job.id} {job.state}" + (f" (exit {job.exit_code})" if job.exit_code is not None else "")
    if not text.strip():
        return None, f"{exit_note} and left no report ({REPORT_FILE}); its output ends: {_log_tail(plane, job)!r}"
    try:
        return json.loads(text), ""
    except ValueError as exc:
        return None, f"{exit_note}; its report is not JSON ({exc}): {text[:200]!r}"


def _log_tail(plane: Plane, job: Job) -> str:
    out = []
    for h in job.handles or []:
        handle = Handle.from_json(h)
        backend = plane.backends.get(handle.backend)
        if backend is not None:
            try:
                out.append(backend.logs(handle, LOG_TAIL))
            except Exception as exc:  # the run's error is still written, without the output
                out.append(f"(output unreadable: {type(exc).__name__})")
    return "".join(out).strip()[-LOG_TAIL:]


def collect(plane: Plane, limits: Thresholds | None = None) -> list[int]:
    """Control-loop phase: settle the waiting runs whose job ended; returns their ids.
    One small read when none did."""
    with plane.db.sessions() as s:
        due = list(
            s.execute(
                select(NodeVerifyRun.id, Job.id)
                .join(Job, Job.id == NodeVerifyRun.job_id)
                .where(NodeVerifyRun.state == "waiting", Job.state.in_(JOB_FINAL))
            )
        )
    if not due:
        return []
    limits = limits or verification.thresholds_from_env()
    done = []
    for run_id, job_id in due:
        with plane.db.sessions() as s:  # read the job's report outside any write transaction
            job = s.get(Job, job_id)
            assert job is not None
            report, error = (None, f"job {job.id} was cancelled") if job.state == "cancelled" else read_report(plane, job)
        with plane.db.transaction() as s:
            run = s.get(NodeVerifyRun, run_id)
            if run is None or run.state != "waiting":
                continue  # another server settled it
            node = s.get(Node, run.node_id)
            assert node is not None
            if report is not None:
                try:
                    row, _ = verification.record_in(s, run.actor, node, report, limits, run.uncordon, job_id)
                except Invalid as exc:
                    error = f"job {job_id}'s report is not a `suanli verify --json` report: {exc.message}"
                else:
                    run.verification_id = row.id
            run.state = "failed" if error else "recorded"
            run.error = error[:4000]
            run.finished_at = utcnow()
            log.info("verification run %s of %s: %s %s", run.id, node.name, run.state, error)
        done.append(run_id)
    return done


__all__ = ["REPORT_FILE", "RunView", "collect", "command", "get", "pinned_request", "submit", "view"]
