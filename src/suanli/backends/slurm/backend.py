"""``SlurmBackend``: the control plane's Backend protocol on a real Slurm cluster.

Suanli's scheduler decides; Slurm executes and enforces. Every task is one batch job
pinned to the node Suanli chose (``--nodelist``) with that node's GPU type and count
(``--gres=gpu:TYPE:N``) or, for a fraction of a GPU, shards (``--gres=shard:TYPE:K``).
Slurm picks the GPU *indices* inside the node; ``placement`` reads them back so the
control plane can record what the job really sees in ``CUDA_VISIBLE_DEVICES``.

Why these choices:

- Jobs are tagged ``--comment=<prefix>:<task key>``. After a server restart the
  handles stored in the database lead back to the same job ids, and ``list_running``
  finds every live job by its tag, so reconcile adopts instead of submitting twice.
- Every job is submitted ``--requeue``: when a node dies Slurm requeues the job
  (PENDING) instead of failing it, so reconcile does not record a failure before the
  failover step has moved the job elsewhere from its checkpoint.
- Task files (``setup.sh``, ``run.sh``, ``output.log``, ``preempt_deadline``) live
  under ``root/<key>/``, which must be on storage the Slurm nodes share with the
  server (one host in tests; a shared filesystem on a real cluster).
- ``squeue --json`` is the only status source and costs a process start, so one
  answer is cached briefly and shared by every ``status`` call of a reconcile pass.
- A task with an image runs, on a backend that runs containers, as the local runtime's
  container started on the node by the batch script (``container.py``); without an image,
  or on ``runtime="process"``, the workload is a process of the job as before. The handle
  says which (``runtime``: ``container`` or ``process``) and keeps it across restarts
  (``handle.json`` in the task directory, read back by ``list_running``).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal as signals
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from suanli.backends.base import (
    AlreadyRunning,
    BackendError,
    ExecResult,
    Handle,
    NodeReport,
    Placement,
    TaskSpec,
    TaskState,
    TaskStatus,
    read_log,
)
from suanli.backends.local.container_runtime import write_atomic
from suanli.backends.slurm.client import SlurmClient, SlurmError
from suanli.backends.slurm.container import SlurmContainers
from suanli.backends.slurm.model import NodeHealth, SlurmJob, SlurmNode
from suanli.backends.slurm.parse import SlurmParseError
from suanli.backends.slurm.reports import job_placement, node_report
from suanli.backends.slurm.sbatch import RESERVED_ENV, SbatchSpec, SbatchSpecError, shards_for_milli
from suanli.inventory import Inventory, NodeDecl

#: Variables the control plane sets that Slurm owns on a Slurm node (it picks the GPUs).
SLURM_OWNED_ENV = RESERVED_ENV | {"ASCEND_RT_VISIBLE_DEVICES"}
#: The batch script runs ``setup.sh`` then execs ``run.sh``, so the workload is the
#: process the wrapper forwards USR1/TERM to (an extra shell would swallow them).
COMMAND = (
    'if [ -s "$SUANLI_TASK_DIR/setup.sh" ]; then bash "$SUANLI_TASK_DIR/setup.sh" || exit $?; fi\n'
    'exec bash "$SUANLI_TASK_DIR/run.sh"'
)
#: The notice (USR1) reaches the workload's whole process group; the shell running
#: ``run.sh`` must survive it so that a program under it (``python train.py``) gets to
#: act on it. A trap (not an ignore) is reset in children, and a run that sets its own
#: USR1 trap replaces this one.
RUN_PREAMBLE = "trap : USR1\n"
#: Slurm job states that mean "the job died with its node", not "the workload exited".
NODE_LOST_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL"})


class SlurmBackend:
    """Run Suanli tasks as pinned Slurm batch jobs on one cluster."""

    name = "slurm"

    def __init__(
        self,
        client: SlurmClient,
        root: Path,
        *,
        tag_prefix: str = "suanli",
        notice_s: int = 300,
        partition: str | None = None,
        cache_s: float = 0.3,
        runtime: str | None = None,
        engine: str = "podman",
        gpu_access: str | None = None,
        pull: str = "missing",
    ) -> None:
        """``runtime``: ``container`` (tasks with an image run in a container of ``engine`` on
        their node; the node must have it), ``process``, or ``auto`` (containers when
        ``engine`` is installed here, as it is on the cluster's nodes in the usual setup of
        one image for all machines); default ``$SUANLI_RUNTIME``, else ``auto``.
        ``gpu_access``: ``cdi`` (NVIDIA's CDI devices on the nodes) or ``virtual``
        (``CUDA_VISIBLE_DEVICES`` only); default: ``cdi`` where this host has a CDI spec."""
        if not tag_prefix or any(c.isspace() or c == ":" for c in tag_prefix):
            raise ValueError(f"tag_prefix must be one word without ':', got {tag_prefix!r}")
        if notice_s < 0:
            raise ValueError("notice_s must be >= 0")
        self.client = client
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.tag_prefix = tag_prefix
        self.notice_s = notice_s
        self.partition = partition
        self.cache_s = cache_s
        self._lock = threading.Lock()
        self._jobs: tuple[float, dict[int, SlurmJob]] = (-math.inf, {})
        self._nodes: tuple[float, dict[str, SlurmNode]] = (-math.inf, {})
        runtime = runtime or os.environ.get("SUANLI_RUNTIME") or "auto"
        if runtime not in ("auto", "container", "process"):
            raise ValueError(f"runtime must be auto, container or process, got {runtime!r}")
        if runtime == "auto":
            runtime = "container" if shutil.which(engine) else "process"
        self.runtime = runtime
        if gpu_access is None:
            from suanli.backends.local.container_runtime import cdi_available

            gpu_access = "cdi" if cdi_available() else "virtual"
        prefix = tag_prefix if tag_prefix.startswith("suanli") else f"suanli-{tag_prefix}"
        self.containers = SlurmContainers(prefix=prefix, tag=tag_prefix, gpu_access=gpu_access, engine=engine, pull=pull)

    # -- cached views of the cluster -----------------------------------------------------
    def jobs(self, fresh: bool = False) -> dict[int, SlurmJob]:
        """Every job squeue knows, by id (cached for ``cache_s``)."""
        with self._lock:
            at, jobs = self._jobs
            if fresh or time.monotonic() - at > self.cache_s:
                jobs = {j.job_id: j for j in self.client.jobs()}
                self._jobs = (time.monotonic(), jobs)
            return jobs

    def nodes(self, fresh: bool = False) -> dict[str, SlurmNode]:
        """Every Slurm node by name (cached like ``jobs``; node GRES rarely change)."""
        with self._lock:
            at, nodes = self._nodes
            if fresh or time.monotonic() - at > max(self.cache_s, 5.0):
                nodes = {n.name: n for n in self.client.nodes()}
                self._nodes = (time.monotonic(), nodes)
            return nodes

    def _forget_jobs(self) -> None:
        with self._lock:
            self._jobs = (-math.inf, {})

    def tag(self, key: str) -> str:
        return f"{self.tag_prefix}:{key}"

    def task_dir(self, key: str) -> Path:
        if not key or "/" in key or key.startswith(".") or any(c.isspace() for c in key):
            raise BackendError(f"bad task key {key!r}")
        return self.root / key

    def _active_by_tag(self, key: str, fresh: bool = False) -> list[SlurmJob]:
        """Live jobs of a task key. A COMPLETING job is over for its workload (a stopped
        job on a dead node can linger in it), so it does not block a resubmission."""
        tag = self.tag(key)
        return [j for j in self.jobs(fresh).values() if j.comment == tag and j.is_active and j.state != "COMPLETING"]

    # -- inventory -------------------------------------------------------------------------
    def discover_inventory(self) -> Inventory:
        """The cluster's nodes as an inventory the control plane registers (``nodes add``).

        Names are Slurm's node names, so a task's node is the ``--nodelist`` value. Suanli
        models one GPU model per node; a node with several GPU types is refused rather than
        silently mislabelled.
        """
        decls = []
        for node in self.nodes(fresh=True).values():
            types = node.gpus()
            if len(types) > 1:
                raise BackendError(
                    f"Slurm node {node.name} has GPUs of several types {sorted(types)}; Suanli needs one GPU model per node"
                )
            gpu_type, count = next(iter(types.items())) if types else ("none", 0)
            model = (gpu_type or "gpu").upper()
            labels = {
                "slurm_node": node.name,
                "slurm_gpu_type": gpu_type,
                "shards_per_gpu": str(node.shards_per_gpu),
                "slurm_state": node.state,
            }
            decls.append(
                NodeDecl(
                    name=node.name,
                    gpu_model=model,
                    gpu_count=count,
                    gpu_memory_gib=_catalog_memory_gib(model),
                    cpu_cores=max(1, node.cpus),
                    memory_gib=max(1, node.memory_mb) / 1024,
                    backend="slurm",
                    zone=(node.partitions[0] if node.partitions else ""),
                    labels=labels,
                )
            )
        if not decls:
            raise BackendError("the Slurm cluster reports no nodes")
        return Inventory(nodes=decls)

    def node_health(self, fresh: bool = True) -> list[NodeReport]:
        """``ReportsNodeHealth``: up / draining / down per node, from ``sinfo`` (fresh by
        default: this is what failover acts on)."""
        try:
            nodes = self.nodes(fresh)
        except (SlurmError, SlurmParseError) as exc:
            raise BackendError(f"cannot read Slurm's node states: {exc}") from exc
        return [node_report(n) for _, n in sorted(nodes.items())]

    # -- Backend protocol ----------------------------------------------------------------
    def sbatch_spec(self, spec: TaskSpec) -> SbatchSpec:
        """The pinned sbatch job for one task (pure apart from the cached node view)."""
        node = self.nodes().get(spec.node) or self.nodes(fresh=True).get(spec.node)
        if node is None:
            raise BackendError(f"no Slurm node {spec.node!r} (known: {', '.join(sorted(self.nodes()))})")
        types = node.gpus()
        gpu_type = next(iter(types)) if len(types) == 1 else None
        gpu_count = shards = 0
        if spec.gpu_indices and spec.milli_per_gpu >= 1000:
            gpu_count = len(spec.gpu_indices)
        elif spec.gpu_indices:
            if len(spec.gpu_indices) != 1:
                raise BackendError(f"{spec.key}: a fraction of a GPU is one GPU, got {spec.gpu_indices}")
            shards = shards_for_milli(spec.milli_per_gpu, node.shards_per_gpu)
        tdir = self.task_dir(spec.key)
        workdir = spec.workdir or str(tdir / "work")
        cpus = max(1, math.ceil(spec.cpu_milli / 1000))
        in_container = self.in_container(spec)
        # a container's environment is its env.sh; the batch script keeps only its own
        env = {} if in_container else {k: v for k, v in spec.env.items() if k not in SLURM_OWNED_ENV}
        # secrets only in the batch script, which goes to sbatch on stdin and lives in Slurm's own
        # spool (never in a file of ours); a container takes them from it with ``-e NAME``
        env.update(spec.secrets)
        env.update(
            {
                "SUANLI_TASK_DIR": str(tdir),
                "SUANLI_WORKDIR": workdir,
                "SUANLI_PREEMPT_DEADLINE_FILE": str(tdir / "preempt_deadline"),
                "SUANLI_SLURM_TAG": self.tag(spec.key),
            }
        )
        command = self.containers.command(spec, str(tdir), workdir, cpus) if in_container else COMMAND
        return SbatchSpec(
            name=spec.key,
            command=command,
            node=spec.node,
            gpu_type=gpu_type,
            gpu_count=gpu_count,
            shards=shards,
            cpus=cpus,
            memory_mb=spec.memory_mib or None,
            partition=self.partition,
            requeue=True,
            notice_s=self.notice_s,
            env=env,
            output=str(tdir / "output.log"),
            # a process starts where the job's uploaded code is; a container there too (SUANLI_CWD)
            workdir=str(Path(workdir) / spec.cwd) if spec.cwd and not in_container else workdir,
            comment=self.tag(spec.key),
            engine=self.containers.engine if in_container else None,
        )

    def in_container(self, spec: TaskSpec) -> bool:
        """A task with an image, on a backend that runs containers."""
        return self.runtime == "container" and bool(spec.image)

    def submit(self, spec: TaskSpec) -> Handle:
        """sbatch the task pinned to its node; at most one live job per task key."""
        running = self._active_by_tag(spec.key, fresh=True)
        if running:
            raise AlreadyRunning(f"{spec.key} is already Slurm job {running[0].job_id}")
        try:
            sb = self.sbatch_spec(spec)
        except SbatchSpecError as exc:
            raise BackendError(f"{spec.key}: {exc}") from exc
        tdir = self.task_dir(spec.key)
        tdir.mkdir(parents=True, exist_ok=True)
        Path(sb.workdir or tdir).mkdir(parents=True, exist_ok=True)
        (tdir / "preempt_deadline").unlink(missing_ok=True)
        (tdir / "handle.json").unlink(missing_ok=True)
        # what exec gives its commands: never the secrets (they are in no file of ours)
        write_atomic(tdir / "env.json", json.dumps({k: v for k, v in sb.env.items() if k not in spec.secrets}))
        data: dict[str, object] = {"runtime": "process"}
        if sb.engine:
            for name, (text, mode) in self.containers.files(spec).items():
                write_atomic(tdir / name, text, mode)
            data = {
                "runtime": "container",
                "container": self.containers.name(spec.key),
                "image": spec.image,
                "network": self.containers.network(spec),
                "volume": sb.workdir,
                "gpu_access": self.containers.gpu_access if spec.gpu_indices else "none",
                "disk_enforced": False,
            }
        else:
            write_atomic(tdir / "setup.sh", spec.setup + "\n" if spec.setup else "")
            write_atomic(tdir / "run.sh", RUN_PREAMBLE + spec.run + "\n")
        try:
            job_id = self.client.submit(sb)
        except SlurmError as exc:
            raise BackendError(f"sbatch for {spec.key} on {spec.node} failed: {exc}") from exc
        finally:
            self._forget_jobs()
        data.update({"job_id": job_id, "tag": sb.comment, "dir": str(tdir), "node": spec.node})
        write_atomic(tdir / "handle.json", json.dumps(data))  # what list_running hands a restarted server
        return Handle(self.name, spec.key, data)

    def job(self, handle: Handle, fresh: bool = False) -> SlurmJob | None:
        job_id = handle.data.get("job_id")
        return None if job_id is None else self.jobs(fresh).get(int(job_id))

    def status(self, handle: Handle) -> TaskStatus:
        """PENDING (including requeued) and RUNNING are ``running`` to the control plane:
        the job is Slurm's to start; a job that died with its node is ``lost``."""
        job = self.job(handle)
        if job is None and handle.data.get("job_id") is not None:
            job = self._from_accounting(int(handle.data["job_id"]))
        if job is None:
            return TaskStatus(TaskState.LOST)
        if job.is_active:
            return TaskStatus(TaskState.RUNNING)
        if job.state in NODE_LOST_STATES:
            return TaskStatus(TaskState.LOST)
        ended = float(job.end_time) if job.end_time > 0 else None  # Slurm's End, whole seconds
        if job.exit.signal:
            return TaskStatus(TaskState.EXITED, -job.exit.signal, ended)
        if job.state == "CANCELLED" and job.exit.code == 0:
            return TaskStatus(TaskState.EXITED, -int(signals.SIGTERM), ended)
        if job.state in ("TIMEOUT", "PREEMPTED", "DEADLINE", "OUT_OF_MEMORY") and job.exit.code == 0:
            return TaskStatus(TaskState.EXITED, -int(signals.SIGKILL), ended)
        return TaskStatus(TaskState.EXITED, job.exit.code, ended)

    def _from_accounting(self, job_id: int) -> SlurmJob | None:
        """Jobs older than MinJobAge leave squeue; sacct (when slurmdbd runs) still knows."""
        try:
            records = [r for r in self.client.accounting([job_id]) if r.job_id == job_id]
        except (SlurmError, SlurmParseError):  # no slurmdbd, or "Nothing found"
            return None
        return records[-1] if records else None

    def stop(self, handle: Handle, grace_s: float = 10.0) -> None:
        """TERM the workload (through the wrapper), wait up to ``grace_s``, then scancel
        (Slurm sends TERM, then KILL after KillWait). Idempotent.

        On a node that is down or NOT_RESPONDING no signal arrives and the job stays
        RUNNING until slurmd returns, so there is no grace wait (it would only hold the
        control loop): scancel at once. Slurm keeps the job COMPLETING until the node is
        DOWN; its processes outlive slurmd and are killed when slurmd registers again."""
        job = self.job(handle, fresh=True)
        job_id = handle.data.get("job_id")
        if job_id is None or (job is not None and not job.is_active):
            return
        if job is not None and job.node and grace_s > 0 and self._node_down(job.node):
            grace_s = 0
        try:
            if job is not None and job.state == "RUNNING" and grace_s > 0:
                self.client.signal(int(job_id), "TERM", batch_only=True)
                deadline = time.monotonic() + grace_s
                while time.monotonic() < deadline:
                    time.sleep(0.1)
                    j = self.job(handle, fresh=True)
                    if j is None or j.state not in ("RUNNING",):
                        break
            self.client.cancel(int(job_id))
        except SlurmError as exc:
            if "Invalid job id" not in str(exc) and "already completing" not in str(exc).lower():
                raise BackendError(f"cannot stop {handle.key} (Slurm job {job_id}): {exc}") from exc
        finally:
            self._forget_jobs()

    def _node_down(self, name: str) -> bool:
        """Whether Slurm reports the node down (the view the health sync refreshes)."""
        try:
            node = self.nodes().get(name)
        except (SlurmError, SlurmParseError):
            return False
        return node is not None and node.health == NodeHealth.DOWN

    def signal(self, handle: Handle, sig: int) -> None:
        """USR1 and TERM go to the batch wrapper, which records the notice and forwards
        them; any other signal goes to every process of the job."""
        job = self.job(handle, fresh=True)
        if job is None or job.state != "RUNNING":
            return
        name = signals.Signals(sig).name.removeprefix("SIG")
        try:
            self.client.signal(job.job_id, name, batch_only=name in ("USR1", "TERM"))
        except SlurmError as exc:
            raise BackendError(f"cannot signal {handle.key} (Slurm job {job.job_id}): {exc}") from exc

    def notice(self, handle: Handle, deadline: float, send_signal: bool = True) -> None:
        """``SupportsNotice``: write the deadline where the job reads it, then (with
        ``send_signal``) USR1 through the wrapper, which also records it from the same
        ``notice_s``."""
        path = Path(handle.data.get("dir") or self.task_dir(handle.key)) / "preempt_deadline"
        path.write_text(f"{int(deadline)}\n")
        if send_signal:
            self.signal(handle, signals.SIGUSR1)

    def logs(self, handle: Handle, tail_bytes: int | None = None) -> str:
        return read_log(Path(handle.data.get("dir") or self.task_dir(handle.key)) / "output.log", tail_bytes)

    def list_running(self) -> list[Handle]:
        """Every live job carrying this server's tag: how a restarted server re-adopts."""
        prefix = f"{self.tag_prefix}:"
        out = []
        for job in sorted(self.jobs(fresh=True).values(), key=lambda j: j.job_id):
            if job.is_active and job.comment.startswith(prefix):
                key = job.comment[len(prefix) :]
                data = {
                    "runtime": "process",
                    "job_id": job.job_id,
                    "tag": job.comment,
                    "dir": str(self.task_dir(key)),
                    "node": job.node or "",
                }
                try:
                    stored = json.loads((self.task_dir(key) / "handle.json").read_text())
                except (OSError, ValueError):
                    stored = {}
                if stored.get("job_id") == job.job_id:
                    data = {**stored, "node": job.node or stored.get("node", "")}
                out.append(Handle(self.name, key, data))
        return out

    # -- Slurm-specific capabilities -------------------------------------------------------
    def exec(self, handle: Handle, command: str, timeout_s: float = 60.0) -> ExecResult:
        """Run ``command`` inside the running job (a Slurm step on its node, sharing its
        allocation) with the task's environment and the GPUs Slurm gave it; under a spot
        notice also ``SUANLI_PREEMPT_DEADLINE``."""
        job = self.job(handle, fresh=True)
        if job is None or job.state != "RUNNING" or not job.node:
            raise BackendError(f"{handle.key} is not running")
        tdir = Path(handle.data.get("dir") or self.task_dir(handle.key))
        if handle.data.get("runtime") == "container":
            return self._exec_container(handle, job, tdir, command, timeout_s)
        env = json.loads((tdir / "env.json").read_text()) if (tdir / "env.json").exists() else {}
        gpus = job.gpu_indices.get(job.node, ())
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
        deadline = tdir / "preempt_deadline"
        if deadline.exists():
            env["SUANLI_PREEMPT_DEADLINE"] = deadline.read_text().strip()
        exports = "".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in env.items())
        try:
            code, output = self.client.step(
                int(job.job_id), job.node, ["bash", "-c", exports + command], env.get("SUANLI_WORKDIR") or str(tdir), timeout_s
            )
        except SlurmError as exc:
            raise BackendError(f"exec in {handle.key} (Slurm job {job.job_id}): {exc}") from exc
        with open(tdir / "output.log", "a") as log:
            log.write(f"$ {command}\n{output}")
        return ExecResult(code, output)

    def _exec_container(self, handle: Handle, job: SlurmJob, tdir: Path, command: str, timeout_s: float) -> ExecResult:
        """``podman exec`` into the task's container, as a step on its node (the engine is
        there, not here); the container's environment, not the server's, is what it sees."""
        assert job.node is not None
        argv = self.containers.exec_argv(handle.key, command, timeout_s)
        try:
            code, output = self.client.step(int(job.job_id), job.node, argv, str(tdir), timeout_s + 10)
        except SlurmError as exc:
            raise BackendError(f"exec in {handle.key} (Slurm job {job.job_id}): {exc}") from exc
        if code == 137 and "timed out" not in output:  # the inner `timeout -s KILL`
            code, output = 124, output + f"\n[suanli] timed out after {timeout_s}s\n"
        with open(tdir / "output.log", "a") as log:
            log.write(f"$ {command}\n{output}")
        return ExecResult(code, output)

    def placement(self, handle: Handle) -> tuple[str, tuple[int, ...]] | None:
        """(node, GPU indices) Slurm gave a running job, or None while it is not running."""
        where = job_placement(handle.key, self.job(handle))
        return None if where is None else (where.node, where.gpu_indices)

    def placements(self, handles: Sequence[Handle]) -> list[Placement]:
        """``ReportsPlacements``: where Slurm put those of ``handles`` that run now (one
        cached ``squeue`` answers the whole pass)."""
        try:
            found = [job_placement(h.key, self.job(h)) for h in handles]
        except (SlurmError, SlurmParseError) as exc:
            raise BackendError(f"cannot read Slurm's jobs: {exc}") from exc
        return [p for p in found if p is not None]

    def requeue(self, handle: Handle, node: str | None = None) -> None:
        """Slurm's own requeue (same job id, restart count + 1). With ``node`` the job is
        re-pinned there and may start at once; without, Slurm restarts it where it was
        after ``cred_expire + 1`` s. Suanli's reclaim and failover stop and resubmit
        instead, because a requeued batch script keeps the environment of its first
        placement; this is for operators and jobs Suanli did not place."""
        job_id = handle.data.get("job_id")
        if job_id is None:
            raise BackendError(f"{handle.key}: no Slurm job id in the handle")
        try:
            self.client.requeue(int(job_id))
            if node is not None:
                # re-pinning needs the job back in PENDING (it passes through COMPLETING)
                deadline = time.monotonic() + 30
                while (j := self.jobs(fresh=True).get(int(job_id))) is not None and j.state != "PENDING":
                    if time.monotonic() > deadline:
                        raise BackendError(f"{handle.key}: Slurm job {job_id} did not return to PENDING ({j.state})")
                    time.sleep(0.1)
                self.client.update_pending(int(job_id), node=node, start_now=True)
        except SlurmError as exc:
            raise BackendError(f"cannot requeue {handle.key} (Slurm job {job_id}): {exc}") from exc
        finally:
            self._forget_jobs()


def _catalog_memory_gib(model: str) -> float:
    """GPU memory from the advisor's datasheet catalog; 0 when the model is unknown."""
    try:
        from suanli.advisor.catalog import find_gpu

        return float(find_gpu(model).memory_gb)
    except Exception:
        return 0.0
