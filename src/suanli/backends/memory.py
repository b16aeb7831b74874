"""``InMemoryBackend``: a fake backend for tests. It runs nothing.

It keeps the Backend protocol's rules (``backends.base``) on a table in memory: ``submit``
records the spec and answers a ``Handle``; the task then "runs" until the test says how it
ends (``exit``, ``lose``) or the control plane stops it. Everything the control plane asks
of it is recorded (submits, stops, signals, notices) for the test to assert on, and its
outcomes are scripted: a stop or a submit that raises ``BackendError`` (fault injection),
a node reported down, the GPUs the backend "chose". So control-loop tests run ticks
against the real database in milliseconds, with no processes, containers or sleeps.

It declares ``SupportsNotice``, ``ReportsNodeHealth`` and ``ReportsPlacements``, so the
loop's health and notice paths run as they do for Slurm. Deterministic (a task is what
the test made it; listings are sorted) and thread-safe (the loop launches and stops in
thread pools): one lock guards every table.
"""

from __future__ import annotations

import signal as signals
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from suanli.backends.base import (
    AlreadyRunning,
    BackendError,
    Handle,
    NodeHealth,
    NodeReport,
    Placement,
    TaskSpec,
    TaskState,
    TaskStatus,
)


@dataclass
class FakeTask:
    """One submit: ``run`` numbers submits, so a handle of an earlier run of the same key
    never reads the state of a later one."""

    spec: TaskSpec
    run: int
    state: TaskState = TaskState.RUNNING
    exit_code: int | None = None
    output: str = ""
    ended_at: float | None = None  #: when it ended, as ``status`` reports it (``exit(at=...)``)

    @property
    def key(self) -> str:
        return self.spec.key


@dataclass(frozen=True)
class Notice:
    """A spot notice as it was delivered: ``signalled`` tells whether SIGUSR1 went with it."""

    key: str
    deadline: float
    signalled: bool


class InMemoryBackend:
    """A fake backend for tests (runs nothing; records calls; outcomes are scripted)."""

    def __init__(self, name: str = "memory", nodes: Iterable[str] = ()) -> None:
        """``nodes``: the nodes ``node_health`` reports, all up until a test says otherwise."""
        self.name = name
        self._lock = threading.Lock()
        self._runs: dict[int, FakeTask] = {}
        self._live: dict[str, int] = {}  #: key -> run of the task that runs now
        self._health: dict[str, NodeReport] = {n: NodeReport(n, NodeHealth.UP) for n in nodes}
        self._chosen: dict[str, tuple[int, ...]] = {}
        self._stop_faults: list[tuple[str | None, str]] = []
        self._submit_faults: list[tuple[str | None, str]] = []
        #: what the control plane did, in order
        self.submitted: list[TaskSpec] = []
        self.stopped: list[tuple[str, float]] = []  #: (key, grace_s) of each stop that succeeded
        self.failed_stops: list[str] = []  #: keys of the stops that raised (injected)
        self.signals: list[tuple[str, int]] = []
        self.notices: list[Notice] = []

    # -- Backend protocol -------------------------------------------------------------------
    def submit(self, spec: TaskSpec) -> Handle:
        with self._lock:
            if spec.key in self._live:
                raise AlreadyRunning(f"{spec.key} is already running")
            self._take_fault(self._submit_faults, spec.node)
            run = len(self._runs) + 1
            self._runs[run] = FakeTask(spec, run)
            self._live[spec.key] = run
            self.submitted.append(spec)
            return self._handle(self._runs[run])

    def status(self, handle: Handle) -> TaskStatus:
        with self._lock:
            task = self._runs.get(int(handle.data.get("run", 0)))
            if task is None or task.state == TaskState.LOST:
                return TaskStatus(TaskState.LOST)
            return TaskStatus(task.state, task.exit_code, task.ended_at)

    def stop(self, handle: Handle, grace_s: float = 10.0) -> None:
        """Ends the task as SIGTERM would (exit -15); idempotent. A scripted fault raises
        ``BackendError`` before anything changes, as an unreachable controller would."""
        with self._lock:
            try:
                self._take_fault(self._stop_faults, handle.key)
            except BackendError:
                self.failed_stops.append(handle.key)
                raise
            task = self._runs.get(int(handle.data.get("run", 0)))
            if task is not None and task.state == TaskState.RUNNING:
                self._end(task, TaskState.EXITED, -int(signals.SIGTERM))
            self.stopped.append((handle.key, grace_s))

    def signal(self, handle: Handle, sig: int) -> None:
        with self._lock:
            task = self._runs.get(int(handle.data.get("run", 0)))
            if task is not None and task.state == TaskState.RUNNING:
                self.signals.append((handle.key, int(sig)))

    def logs(self, handle: Handle, tail_bytes: int | None = None) -> str:
        with self._lock:
            task = self._runs.get(int(handle.data.get("run", 0)))
            text = task.output if task is not None else ""
        return text[-tail_bytes:] if tail_bytes else text

    def list_running(self) -> list[Handle]:
        with self._lock:
            return [self._handle(self._runs[run]) for _, run in sorted(self._live.items())]

    # -- capabilities --------------------------------------------------------------------------
    def notice(self, handle: Handle, deadline: float, send_signal: bool = True) -> None:
        """``SupportsNotice``: records the notice; with ``send_signal`` also SIGUSR1."""
        with self._lock:
            task = self._runs.get(int(handle.data.get("run", 0)))
            if task is None or task.state != TaskState.RUNNING:
                return
            self.notices.append(Notice(handle.key, deadline, send_signal))
            if send_signal:
                self.signals.append((handle.key, int(signals.SIGUSR1)))

    def node_health(self) -> list[NodeReport]:
        """``ReportsNodeHealth``: the nodes given at construction, as ``set_health`` left them."""
        with self._lock:
            return [self._health[n] for n in sorted(self._health)]

    def placements(self, handles: Sequence[Handle]) -> list[Placement]:
        """``ReportsPlacements``: running tasks on the GPUs ``choose_gpus`` gave them, else
        on the planned ones."""
        with self._lock:
            out = []
            for h in handles:
                task = self._runs.get(int(h.data.get("run", 0)))
                if task is not None and task.state == TaskState.RUNNING:
                    gpus = self._chosen.get(task.key, task.spec.gpu_indices)
                    out.append(Placement(task.key, task.spec.node, tuple(gpus)))
            return out

    # -- scripting: what the test makes happen -----------------------------------------------
    def exit(self, key: str, code: int = 0, output: str = "", at: float | None = None) -> None:
        """The running task of ``key`` exits with ``code``; ``at``: when, as the backend
        reports it (epoch seconds; None: it reports no time)."""
        with self._lock:
            task = self._running(key)
            task.output += output
            task.ended_at = at
            self._end(task, TaskState.EXITED, code)

    def lose(self, key: str) -> None:
        """The backend forgets the running task of ``key`` (``status`` answers LOST)."""
        with self._lock:
            self._end(self._running(key), TaskState.LOST, None)

    def fail_stops(self, times: int = 1, key: str | None = None, error: str = "injected: stop failed") -> None:
        """Fault injection: the next ``times`` stops (of ``key``, or of any task) raise ``BackendError``."""
        with self._lock:
            self._stop_faults += [(key, error)] * times

    def fail_submits(self, times: int = 1, node: str | None = None, error: str = "injected: submit failed") -> None:
        """Fault injection: the next ``times`` submits (to ``node``, or anywhere) raise ``BackendError``."""
        with self._lock:
            self._submit_faults += [(node, error)] * times

    def set_health(self, node: str, health: NodeHealth, reason: str = "") -> None:
        """What ``node_health`` reports for ``node`` from now on (its tasks keep running, as
        Slurm's do on a node that stopped answering, until they are stopped)."""
        with self._lock:
            self._health[node] = NodeReport(node, health, reason)

    def choose_gpus(self, key: str, indices: Iterable[int]) -> None:
        """The GPUs the backend "chose" for ``key``, reported by ``placements``."""
        with self._lock:
            self._chosen[key] = tuple(indices)

    # -- observation ----------------------------------------------------------------------------
    def running_keys(self) -> list[str]:
        with self._lock:
            return sorted(self._live)

    def task(self, key: str) -> FakeTask:
        """The latest run of ``key`` (a copy)."""
        with self._lock:
            runs = [t for t in self._runs.values() if t.key == key]
            if not runs:
                raise KeyError(key)
            t = runs[-1]
            return FakeTask(t.spec, t.run, t.state, t.exit_code, t.output, t.ended_at)

    # -- internals (lock held) -------------------------------------------------------------------
    def _handle(self, task: FakeTask) -> Handle:
        return Handle(self.name, task.key, {"run": task.run, "node": task.spec.node, "runtime": "memory"})

    def _running(self, key: str) -> FakeTask:
        run = self._live.get(key)
        if run is None:
            raise KeyError(f"{key} is not running")
        return self._runs[run]

    def _end(self, task: FakeTask, state: TaskState, code: int | None) -> None:
        task.state, task.exit_code = state, code
        if self._live.get(task.key) == task.run:
            del self._live[task.key]

    @staticmethod
    def _take_fault(faults: list[tuple[str | None, str]], target: str) -> None:
        for i, (where, error) in enumerate(faults):
            if where is None or where == target:
                del faults[i]
                raise BackendError(error)
