"""Start claimed work on its backends: plan (what to submit, read in the transaction
that claimed the row, or else in one of its own), submit (no transaction), record the
outcome (transaction).

A row reaches here with allocations and ``launch_owner`` set by the scheduling
pass. If any node's submit fails, the tasks already started are stopped, the
allocations are given back and the row fails: a launch is all or nothing.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from suanli.backends.base import Backend, Handle, TaskSpec
from suanli.backends.local import volumes
from suanli.control import images, keys, uploads, workload_secrets, workloads
from suanli.control.access import JUPYTER_PORT, jupyter_command
from suanli.control.capacity import active_allocations, give_back
from suanli.control.environment import distributed_env, free_port, gpu_env, torch_launch
from suanli.control.lifecycle import transition
from suanli.control.notice import clear_notice
from suanli.control.secrets import Keyring
from suanli.control.volume_paths import inside, volume_path
from suanli.db.clock import utcnow
from suanli.db.models import Allocation, Gpu, Instance, Job, Node
from suanli.db.session import Database

log = logging.getLogger(__name__)

#: An instance's main process: it only keeps the container up (the renter works over SSH,
#: exec and the published ports). A loop, since busybox's sleep knows no "infinity".
INSTANCE_KEEPER = 'echo "[suanli] instance {id} ready on {node} (GPUs: {gpus})"; while :; do sleep 86400; done'


def task_key(kind: str, workload_id: int, rank: int = 0) -> str:
    return f"instance-{workload_id}" if kind == "instance" else f"job-{workload_id}-{rank}"


def disk_dir(data_dir: Path, instance_id: int) -> Path:
    """An instance's persistent disk (``/workspace``): survives stop/start, removed on delete."""
    return data_dir / "disks" / f"instance-{instance_id}"


def remove_disk(data_dir: Path, instance_id: int) -> None:
    volumes.remove(disk_dir(data_dir, instance_id))


def job_volume(data_dir: Path, job_id: int) -> Path:
    """A job's volume (``/workspace`` of each of its nodes): its uploaded code and its
    checkpoints, kept across requeues so a resumed job finds what it saved."""
    return data_dir / "checkpoints" / f"job-{job_id}"


def checkpoint_dir(data_dir: Path, job_id: int, requested: str) -> Path:
    """The host path of a job's ``checkpoint_dir``: always in its volume. A row from before
    paths were checked at submission with a path outside the volume is refused here
    (``ValueError``, the launch fails with the reason), never created."""
    return inside(job_volume(data_dir, job_id), volume_path(requested))


def _nodes(session: Session, allocs: list[Allocation]) -> tuple[dict[int, Node], set[int]]:
    """The nodes of ``allocs`` by id, and which of them have virtual (declared) GPUs, in one query."""
    virtual = select(Gpu.id).where(Gpu.node_id == Node.id, Gpu.virtual.is_(True)).exists()
    rows = session.execute(select(Node, virtual).where(Node.id.in_({a.node_id for a in allocs}))).all()
    return {n.id: n for n, _ in rows}, {n.id for n, v in rows if v}


def build_specs(
    session: Session,
    row: Instance | Job,
    allocs: list[Allocation],
    data_dir: Path,
    keyring: Keyring,
    found: tuple[dict[int, Node], set[int]] | None = None,
) -> list[TaskSpec]:
    """One spec per node, rank 0 first (the other nodes' containers resolve its address).
    The row's secrets are unsealed here, into the specs only (``TaskSpec.secrets``).
    ``found``: what ``_nodes`` gave for ``allocs``, if the caller read it."""
    nodes, virtual = found or _nodes(session, allocs)
    port = free_port()
    specs = []
    img = images.resolve(session, (row.spec.get("image") if isinstance(row, Job) else row.image) or None)
    secrets = workload_secrets.unseal(keyring, row.tenant_id, row.secrets)
    for a in sorted(allocs, key=lambda a: a.node_rank):
        node = nodes[a.node_id]
        env: dict[str, str] = {}
        if isinstance(row, Job):
            spec = row.spec
            task_envs = {str(k): str(v) for k, v in (spec.get("envs") or {}).items()}
            env.update(task_envs)
            env.update(gpu_env(a, node, node.id in virtual))
            env.update(distributed_env(a, allocs, nodes, port, task_envs))
            env.update({"SUANLI_JOB_ID": str(row.id), "SUANLI_TASK_NAME": row.name})
            volume_env = {}
            if spec.get("checkpoint_dir"):
                env["SUANLI_CHECKPOINT_DIR"] = str(checkpoint_dir(data_dir, row.id, spec["checkpoint_dir"]))
                volume_env["SUANLI_CHECKPOINT_DIR"] = volume_path(spec["checkpoint_dir"])
            if secrets:
                env["SUANLI_SECRET_NAMES"] = " ".join(sorted(secrets))
            specs.append(
                TaskSpec(
                    key=task_key("job", row.id, a.node_rank),
                    kind="job",
                    workload_id=row.id,
                    node=node.name,
                    node_rank=a.node_rank,
                    run=torch_launch(spec.get("run") or "") if spec.get("distributed") == "torch" else spec.get("run") or "",
                    setup=spec.get("setup") or "",
                    env=env,
                    workdir=str(job_volume(data_dir, row.id)),
                    cwd="code" if spec.get("code") else "",
                    volume_env=volume_env,
                    gpu_indices=tuple(a.gpu_indices),
                    milli_per_gpu=a.milli_per_gpu,
                    cpu_milli=a.cpu_milli,
                    memory_mib=a.memory_mib,
                    image=img.ref,
                    tenant_id=row.tenant_id,
                    secrets=secrets,
                )
            )
        else:
            env.update(gpu_env(a, node, node.id in virtual))
            env.update({"SUANLI_INSTANCE_ID": str(row.id), "SUANLI_IMAGE": row.image, "SUANLI_DISK_GIB": str(row.disk_gib)})
            if secrets:
                env["SUANLI_SECRET_NAMES"] = " ".join(sorted(secrets))
            gpus = ",".join(str(i) for i in a.gpu_indices) or "none"
            keeper = INSTANCE_KEEPER.format(id=row.id, node=node.name, gpus=gpus)
            if (img.contents or {}).get("jupyterlab") and JUPYTER_PORT in (row.ports or []):
                keeper = jupyter_command() + "\n" + keeper
            specs.append(
                TaskSpec(
                    key=task_key("instance", row.id),
                    kind="instance",
                    workload_id=row.id,
                    node=node.name,
                    node_rank=0,
                    run=keeper,
                    env=env,
                    workdir=str(disk_dir(data_dir, row.id)),
                    gpu_indices=tuple(a.gpu_indices),
                    milli_per_gpu=a.milli_per_gpu,
                    cpu_milli=a.cpu_milli,
                    memory_mib=a.memory_mib,
                    image=img.ref,
                    tenant_id=row.tenant_id,
                    ports=tuple(int(p) for p in row.ports or ()),
                    authorized_keys=keys.authorized_keys(session, row.user_id),
                    disk_gib=row.disk_gib,
                    secrets=secrets,
                )
            )
    return specs


@dataclass(frozen=True)
class Plan:
    """What a launch submits: one spec per node, rank 0 first, and each one's backend."""

    specs: list[TaskSpec]
    backends: list[str]
    tenant_id: int
    #: a job's uploaded code, put into its volume before the submit (``_prepare``)
    code: str | None


def plan(session: Session, row: Instance | Job, allocs: list[Allocation], data_dir: Path, keyring: Keyring) -> Plan:
    """The launch of ``row`` on ``allocs``; the control loop has it made in the
    transaction that claims the row (``scheduling.claim``), where both were just read."""
    found = _nodes(session, allocs)
    specs = build_specs(session, row, allocs, data_dir, keyring, found)
    by_rank = {a.node_rank: found[0][a.node_id].backend for a in allocs}
    code = row.spec.get("code") if isinstance(row, Job) else None
    return Plan(specs, [by_rank[sp.node_rank] for sp in specs], row.tenant_id, code)


def launch(
    db: Database,
    backends: dict[str, Backend],
    kind: str,
    workload_id: int,
    owner: str,
    data_dir: Path,
    keyring: Keyring,
    planned: Plan | None = None,
) -> None:
    """Submit a claimed row's tasks and record the outcome. ``planned``: its ``plan``,
    made as it was claimed by this ``owner`` (a claimed row changes no more until its
    launch ends); else read here."""
    if planned is None:
        with db.transaction() as s:
            row = workloads.get(s, kind, workload_id)
            if row is None or row.launch_owner != owner or row.handles is not None:
                return
            planned = plan(s, row, active_allocations(s, row), data_dir, keyring)
    specs = planned.specs
    started: list[tuple[Backend, Handle]] = []
    error = None
    for spec, bname in zip(specs, planned.backends):
        try:
            _prepare(spec, bname, data_dir, planned.tenant_id, planned.code)
            backend = backends[bname]
            started.append((backend, backend.submit(spec)))
        except Exception as exc:  # any backend failure fails this launch, not the loop
            error = f"launch failed on {spec.node}: {exc}"
            break
    if error:
        for backend, handle in started:
            backend.stop(handle, grace_s=2)
    with db.transaction() as s:
        row = workloads.get(s, kind, workload_id)
        assert row is not None
        row.launch_owner = None
        if error:
            log.warning("%s %s: %s", kind, workload_id, error)
            workloads.end(s, row, "failed", error)
            return
        row.handles = [h.to_json() for _, h in started]
        clear_notice(row)  # a notice of an earlier run does not carry over
        row.runtime = str(started[0][1].data.get("runtime", "")) if started else ""
        transition(s, row, "running", f"started on {', '.join(sp.node for sp in specs)}")
        if isinstance(row, Job):
            row.started_at = utcnow()


def _prepare(spec: TaskSpec, backend: str, data_dir: Path, tenant_id: int, code: str | None) -> None:
    """Host-side setup before a submit: the job's uploaded code into its volume (once: a
    resumed job keeps what it changed), and the directories a non-local backend expects."""
    if spec.workdir:
        Path(spec.workdir).mkdir(parents=True, exist_ok=True)
        dest = Path(spec.workdir) / "code"
        if code and spec.node_rank == 0 and not os.path.lexists(dest):
            uploads.extract_into(data_dir, tenant_id, code, dest)
    if backend != "local" and "SUANLI_CHECKPOINT_DIR" in spec.env and spec.workdir:
        # checked again now: a symlink the job left in its volume must not lead the server out
        inside(Path(spec.workdir), spec.volume_env.get("SUANLI_CHECKPOINT_DIR", "")).mkdir(parents=True, exist_ok=True)


def fail_launch(db: Database, kind: str, workload_id: int, owner: str, error: str) -> None:
    """The launch itself broke (not the backend): release and fail the row we
    claimed, so it does not sit claimed until the next restart."""
    with db.transaction() as s:
        row = workloads.get(s, kind, workload_id)
        if row is None or row.launch_owner != owner or row.handles is not None:
            return
        row.launch_owner = None
        workloads.end(s, row, "failed", f"launch failed: {error}")


def unclaim(db: Database, kind: str, workload_id: int, owner: str) -> None:
    """Give back a claim this server will not launch (it is shutting down): the
    row keeps waiting and is placed again, by this server's next start or another."""
    with db.transaction() as s:
        row = workloads.get(s, kind, workload_id)
        if row is None or row.launch_owner != owner or row.handles is not None:
            return
        row.launch_owner = None
        give_back(s, row)
