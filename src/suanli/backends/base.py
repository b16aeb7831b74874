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
  ``TaskState.LOST`` and the reconcile loop decides.
- ``stop`` is idempotent and ends the whole task (process group, Slurm job).
- ``list_running`` reports every task the backend still runs, so reconcile can
  adopt tasks the database knows and stop the ones it does not.

Optional capabilities are separate protocols (``SupportsExec``), checked with
``isinstance`` — a backend declares what it can do by implementing them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
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
