"""The contract between the control plane and an execution backend.

A workload (an instance, or one node's share of a job) is handed to a backend as
a ``TaskSpec``: what to run, where (node, GPU indices), with which environment.
The backend answers with a ``Handle``: JSON-serialisable data the control plane
stores and later passes back to ``status``/``stop``/``signal``/``logs``. The
handle is all a backend may rely on after a server restart.

Rules every backend follows:

- ``submit`` starts the task at most once per ``spec.key``; a second submit of a
  key that is already running raises ``AlreadyRunning``.
- ``status`` never raises for a task the backend has forgotten: it answers
  ``TaskState.LOST`` and the reconcile loop decides. For a task that ended it says
  when (``TaskStatus.ended_at``) where it recorded that.
- ``stop`` is idempotent and ends the whole task (process group, Slurm job).
- ``list_running`` reports every task the backend still runs, so reconcile can
  adopt tasks the database knows and stop the ones it does not.

Optional capabilities are separate protocols, checked with ``isinstance`` (as
SkyPilot's ``CloudImplementationFeatures``): a backend declares what it can do by
implementing them, and the control plane never asks which backend it is talking to.

============================  ==========================================  ==========================
capability                    what the control plane does with it          implemented by
============================  ==========================================  ==========================
``SupportsExec``              ``exec`` into a running instance             local, slurm
``SupportsSsh``               change an instance's authorized keys         local
``SupportsNotice``            deliver a spot notice (deadline file, USR1)  local, slurm, memory
``ReportsNodeHealth``         mark nodes down/up (``control.health``)      slurm, memory
``ReportsPlacements``         record the GPUs the backend itself chose     slurm, memory
``ReportsUsage``              CPU, memory, GPU and session samples          local
                              (``control.metrics``, autostop)
============================  ==========================================  ==========================

A backend without ``SupportsNotice`` gets a bare SIGUSR1 through ``signal``; one without
``ReportsNodeHealth`` has its nodes watched by heartbeats (``control.heartbeat``); one
without ``ReportsPlacements`` runs on exactly the GPUs the scheduler gave it. Reports are
plain data (``NodeReport``, ``Placement``): applying them to the database is the control
plane's job (``control.health``), so a backend never touches it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


class BackendError(RuntimeError):
    """The backend could not do what was asked (submit failed, node unreachable)."""


class AlreadyRunning(BackendError):
    """``submit`` of a key that is still running: the task must not start twice."""


@dataclass(frozen=True)
class TaskSpec:
    """One unit of work for a backend: a whole instance or one node of a job."""

    key: str  #: unique and stable, e.g. ``job-12-0`` (job 12, node rank 0) or ``instance-3``
    kind: str  #: ``job`` or ``instance``
    workload_id: int
    node: str
    node_rank: int
    run: str  #: shell command; for an instance, the command that keeps it alive
    setup: str = ""
    env: dict[str, str] = field(default_factory=dict)
    #: host directory of the workload's persistent volume (instance disk, job volume), seen
    #: at ``/workspace`` in a container; None: a fresh scratch directory
    workdir: str | None = None
    gpu_indices: tuple[int, ...] = ()
    milli_per_gpu: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    #: the engine's image reference (``localhost/suanli/python:3.11``); "" for the process runtime
    image: str = ""
    tenant_id: int = 0  #: containers of one tenant share a network; tenants never see each other's
    #: where the run starts, relative to the volume ("code" for a job's uploaded workdir)
    cwd: str = ""
    #: environment variables whose values are paths relative to the volume (``SUANLI_CHECKPOINT_DIR``):
    #: each runtime joins them with where it mounts the volume
    volume_env: dict[str, str] = field(default_factory=dict)
    ports: tuple[int, ...] = ()  #: container ports to publish (on loopback, for the server's proxy)
    #: OpenSSH ``authorized_keys`` text: non-empty starts sshd in the container on port 22
    authorized_keys: str = ""
    disk_gib: int = 0  #: size of the volume to enforce; 0: no limit
    #: the task's secrets, name -> value: in its environment like ``env``, but a backend never
    #: writes them into a file of its own (``env.json``, ``env.sh``, ``sshd_config``); it hands
    #: them to the process or the container as environment only
    secrets: dict[str, str] = field(default_factory=dict, repr=False)

    def secret_names(self) -> str:
        """``SUANLI_SECRET_NAMES``: which variables are secrets, for the task's own tools
        (exec, SSH sessions) that take them from the running workload rather than a file."""
        return " ".join(sorted(self.secrets))


@dataclass(frozen=True)
class Handle:
    """What a backend needs to find a task again; stored as JSON by the control plane."""

    backend: str
    key: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "key": self.key, "data": self.data}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Handle:
        return cls(raw["backend"], raw["key"], dict(raw.get("data") or {}))


class TaskState(str, Enum):
    RUNNING = "running"
    EXITED = "exited"
    LOST = "lost"  #: the backend has no trace of it


@dataclass(frozen=True)
class TaskStatus:
    state: TaskState
    exit_code: int | None = None  #: negative: killed by that signal; None: unknown
    #: when the task ended (epoch seconds), as the backend recorded it: the exit file's
    #: time, the engine's ``FinishedAt``, Slurm's ``End``; None: not known (the control
    #: plane then takes the moment it noticed). After a server restart this is what
    #: ends the allocation, so work that died while the server was down is not billed
    #: until it came back.
    ended_at: float | None = None


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    output: str


def read_log(path: Path, tail_bytes: int | None = None) -> str:
    """A task's output file, or its last ``tail_bytes``; "" before it exists."""
    try:
        with open(path, "rb") as f:
            if tail_bytes:
                f.seek(max(0, path.stat().st_size - tail_bytes))
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


@runtime_checkable
class Backend(Protocol):
    """The one required interface of an execution backend."""

    name: str

    def submit(self, spec: TaskSpec) -> Handle: ...

    def status(self, handle: Handle) -> TaskStatus: ...

    def stop(self, handle: Handle, grace_s: float = 10.0) -> None: ...

    def signal(self, handle: Handle, sig: int) -> None: ...

    def logs(self, handle: Handle, tail_bytes: int | None = None) -> str: ...

    def list_running(self) -> list[Handle]: ...


@runtime_checkable
class SupportsSsh(Protocol):
    """Optional: change who may SSH into a running instance (keys added or removed)."""

    def set_authorized_keys(self, handle: Handle, text: str) -> None: ...


@runtime_checkable
class SupportsExec(Protocol):
    """Optional: run a command inside a running instance's environment."""

    def exec(self, handle: Handle, command: str, timeout_s: float = 60.0) -> ExecResult: ...


@runtime_checkable
class SupportsNotice(Protocol):
    """Optional: deliver a spot reclaim notice the way this backend's tasks read it.

    The deadline (epoch seconds) goes where ``$SUANLI_PREEMPT_DEADLINE_FILE`` points, then,
    with ``send_signal``, SIGUSR1 reaches the workload (an instance's keeper would die of
    it, so instances get the file only). Backends differ in where that file is and how the
    signal travels (Slurm: through its batch wrapper), which is why it is theirs to do."""

    def notice(self, handle: Handle, deadline: float, send_signal: bool = True) -> None: ...


@runtime_checkable
class ReportsExits(Protocol):
    """Optional: the backend calls ``callback`` (from any thread) as soon as one of its
    tasks may have ended, so the control loop polls then instead of at its next interval
    (a pipeline's next job starts when the last one ends, not up to a poll later). Only a
    hint: ends are still read from ``status``."""

    def on_task_exit(self, callback: Callable[[], None]) -> None: ...


class NodeHealth(StrEnum):
    """What a node's state means for placing and keeping work on it."""

    UP = "up"  #: accepts work
    DRAINING = "draining"  #: runs what it has, takes nothing new
    DOWN = "down"  #: its work is lost and must fail over


@dataclass(frozen=True)
class NodeReport:
    """One node as its backend sees it. ``name`` is the node's name in the inventory."""

    name: str
    health: NodeHealth
    reason: str = ""  #: why, in the backend's words (``NOT_RESPONDING``); "" when it has none


@runtime_checkable
class ReportsNodeHealth(Protocol):
    """Optional: the backend watches its own nodes (Slurm's ``sinfo``), so no heartbeat
    agent is needed there. Raises ``BackendError`` when it cannot tell; a node missing
    from the report is left as it is."""

    def node_health(self) -> list[NodeReport]: ...


@dataclass(frozen=True)
class Placement:
    """Where a running task really is: the GPU indices the backend chose on its node
    (the task's ``CUDA_VISIBLE_DEVICES``), which may differ from the planned ones."""

    key: str  #: the task key (``TaskSpec.key``)
    node: str
    gpu_indices: tuple[int, ...]


@runtime_checkable
class ReportsPlacements(Protocol):
    """Optional: the backend picks GPU indices itself (Slurm's GRES: sbatch cannot ask for
    particular ones). Answers for those of ``handles`` that run now; the others (pending,
    gone) are left out. Raises ``BackendError`` when it cannot tell."""

    def placements(self, handles: Sequence[Handle]) -> list[Placement]: ...


@dataclass(frozen=True)
class GpuReading:
    """One physical GPU as NVML read it, for one workload's share of it. Numbers are what
    the driver said, never estimated; a field the driver did not give is None."""

    index: int  #: the GPU's index on its node
    uuid: str
    model: str  #: NVML's name (``NVIDIA H100 80GB HBM3``)
    util_percent: float | None
    memory_used_mib: float | None
    power_w: float | None
    #: ``device`` (the whole GPU is the workload's) or ``process`` (per-process accounting
    #: of a shared GPU: its processes' memory; utilisation from process samples)
    scope: str = "device"


@dataclass(frozen=True)
class UsageSample:
    """What one task used at one moment (``ReportsUsage``).

    ``cpu_percent`` is percent of one core over the interval since the previous sample
    (100 = one core busy); ``memory_mib`` the cgroup's (or process tree's) resident memory.
    GPU fields are None when not measured (virtual GPUs have no NVML; ``gpu_note`` says
    why). ``sessions``: established inbound connections to its SSH or published ports
    (None: the runtime cannot tell, e.g. host processes)."""

    key: str
    cpu_percent: float
    memory_mib: float
    gpu_util_percent: float | None = None
    gpu_memory_mib: float | None = None
    power_w: float | None = None
    gpus: tuple[GpuReading, ...] = ()
    gpu_note: str = ""  #: why GPU fields are None ("not measured: virtual GPU"); "" when measured or no GPU
    sessions: int | None = None
    node: str = ""
    #: False for a task's first reading: its average since it started (start-up included)
    cpu_over_interval: bool = True


@runtime_checkable
class ReportsUsage(Protocol):
    """Optional: sample the resources the given running tasks use now, in one batched
    read (one engine call per interval, not one per task). Tasks it cannot read are left
    out. Raises ``BackendError`` when it cannot read at all."""

    def usage(self, handles: Sequence[Handle]) -> list[UsageSample]: ...
