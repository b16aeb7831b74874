"""The embedded backend: workloads on this host, each in its own container.

``LocalBackend`` holds two runtimes and starts new work on one of them: containers
(``container_runtime``, the default wherever Podman or Docker Engine answers) or, where no
engine exists, host processes (``process_runtime``, no isolation, named as such
everywhere). A handle remembers which runtime started it, so work started before a
change of runtime is still watched, stopped and adopted by the right one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from suanli.backends.base import BackendError, ExecResult, GpuReading, Handle, TaskSpec, TaskStatus, UsageSample
from suanli.backends.local import usage as meter
from suanli.backends.local.container_runtime import ContainerRuntime
from suanli.backends.local.engine import Engine, detect
from suanli.backends.local.exits import ExitWatcher
from suanli.backends.local.nvml import GpuSampler
from suanli.backends.local.process_runtime import ProcessRuntime

log = logging.getLogger(__name__)

#: What listings say of the fallback runtime.
PROCESS_LABEL = "process (no isolation)"


class LocalBackend:
    """This host; the embedded default."""

    name = "local"

    def __init__(
        self,
        root: Path,
        runtime: str = "process",
        engine: Engine | None = None,
        *,
        ssh_bind: str = "127.0.0.1",
        gpus: GpuSampler | None = None,
    ) -> None:
        """``runtime``: ``container`` (needs ``engine``, or one that ``detect`` finds),
        ``process``, or ``auto`` (containers where an engine answers)."""
        self.root = Path(root).resolve()  # tasks run with other working directories
        self.root.mkdir(parents=True, exist_ok=True)
        if runtime in ("auto", "container") and engine is None:
            engine = detect()
            if engine is None and runtime == "container":
                raise BackendError("no container engine answers here (install podman, or run with --runtime process)")
        self.exits = ExitWatcher()
        self.processes = ProcessRuntime(self.root, self.exits)
        self.containers = ContainerRuntime(self.root, engine, ssh_bind=ssh_bind, exits=self.exits) if engine is not None else None
        self.gpus = gpus or GpuSampler()  #: NVML, opened on the first sample of a task on real GPUs
        self._cpu = meter.CpuMeter()
        self.runtime = "container" if self.containers is not None and runtime != "process" else "process"
        if self.runtime == "process":
            log.warning("local backend: workloads run as host processes with NO isolation")

    @property
    def runtime_label(self) -> str:
        return "container" if self.runtime == "container" else PROCESS_LABEL

    def task_dir(self, key: str) -> Path:
        if not key or "/" in key or key.startswith("."):
            raise BackendError(f"bad task key {key!r}")
        return self.root / key

    def _of(self, handle: Handle) -> ContainerRuntime | ProcessRuntime:
        if handle.data.get("runtime") == "container":
            if self.containers is None:
                raise BackendError(f"{handle.key} runs in a container, but no container engine answers here")
            return self.containers
        return self.processes

    # -- Backend protocol -------------------------------------------------------------------
    def submit(self, spec: TaskSpec) -> Handle:
        tdir = self.task_dir(spec.key)
        if self.runtime == "container":
            assert self.containers is not None
            if any(h.key == spec.key for h in self.processes.list_running()):
                raise BackendError(f"{spec.key} still runs as a host process")
            return self.containers.submit(spec, tdir)
        return self.processes.submit(spec, tdir)

    def status(self, handle: Handle) -> TaskStatus:
        if not handle.data:
            return self.processes.status(handle)
        return self._of(handle).status(handle)

    def stop(self, handle: Handle, grace_s: float = 10.0) -> None:
        if handle.data:
            self._of(handle).stop(handle, grace_s)

    def signal(self, handle: Handle, sig: int) -> None:
        if handle.data:
            self._of(handle).signal(handle, sig)

    def notice(self, handle: Handle, deadline: float, send_signal: bool = True) -> None:
        """``SupportsNotice``: the deadline where ``$SUANLI_PREEMPT_DEADLINE_FILE`` points,
        then (with ``send_signal``) USR1."""
        import signal

        if handle.data.get("dir"):
            Path(handle.data["dir"], "preempt_deadline").write_text(f"{int(deadline)}\n")
        if send_signal:
            self.signal(handle, signal.SIGUSR1)

    def logs(self, handle: Handle, tail_bytes: int | None = None) -> str:
        if not handle.data:  # a stopped instance: find its last run's log by key
            raw = self.processes._read_handle(handle.key)
            handle = Handle(self.name, handle.key, raw or {"dir": str(self.task_dir(handle.key))})
        if handle.data.get("runtime") == "container" and self.containers is not None:
            return self.containers.logs(handle, tail_bytes)
        return self.processes.logs(handle, tail_bytes)

    def list_running(self) -> list[Handle]:
        found = self.processes.list_running()
        if self.containers is not None:
            found += self.containers.list_running()
        return found

    # -- optional capabilities -----------------------------------------------------------------
    def on_task_exit(self, callback: Callable[[], None]) -> None:
        """``ReportsExits``: tasks this server started, host processes and containers."""

        def ended() -> None:
            if self.containers is not None:
                self.containers.engine.invalidate()  # the next poll must not read a listing from before the exit
            callback()

        self.exits.on_exit = ended

    def exec(self, handle: Handle, command: str, timeout_s: float = 60.0) -> ExecResult:
        return self._of(handle).exec(handle, command, timeout_s)

    def set_authorized_keys(self, handle: Handle, text: str) -> None:
        if handle.data.get("runtime") == "container" and self.containers is not None:
            self.containers.set_authorized_keys(handle, text)

    def usage(self, handles: Sequence[Handle]) -> list[UsageSample]:
        """``ReportsUsage``: one ``stats`` call for the containers, one pass over ``/proc``
        for host processes (only when there are some), NVML for real GPUs (see ``usage``)."""
        now = time.monotonic()
        conts = [h for h in handles if h.data.get("runtime") == "container"]
        procs = [h for h in handles if h.data.get("runtime") == "process" and h.data.get("pid")]
        out: list[UsageSample] = []
        devices: dict[int, GpuReading | None] = {}

        def gpu_readings(data: dict, mine: Callable[[int], bool]) -> list[GpuReading] | None:
            if not data.get("gpus") or not data.get("gpu_real") or not self.gpus.available():
                return None
            shared = 0 < int(data.get("milli_per_gpu") or 1000) < 1000
            got = []
            for i in data["gpus"]:
                if shared:
                    r = self.gpus.processes(int(i), mine)
                else:
                    if int(i) not in devices:
                        devices[int(i)] = self.gpus.device(int(i))
                    r = devices[int(i)]
                if r is None:
                    return None
                got.append(r)
            return got

        if conts and self.containers is not None:
            stats = meter.parse_stats(self.containers.engine.stats())
            listed: dict | None = None  # ps only for containers whose init pid is not known (older handles)
            for h in conts:
                st = stats.get(h.data.get("name", ""))
                if st is None:
                    continue
                pid = int(h.data.get("init_pid") or 0)
                if not (pid and meter.in_container(pid, st.container_id)):
                    if listed is None:
                        listed = self.containers.engine.ps(self.containers.label)
                    c = listed.get(st.name)
                    pid = c.pid if c is not None else 0
                if st.cpu_percent_now is not None:  # Docker: its own percent, no cumulative counter
                    cpu, measured = st.cpu_percent_now, True
                else:
                    cpu, measured = self._cpu.percent(h.key, st.cpu_ns / 1e9, now, st.avg_cpu_percent)
                sessions = meter.count_sessions(meter.netns_tables(pid), meter.session_ports(h.data)) if pid else None
                cid = st.container_id
                readings = gpu_readings(h.data, lambda p, cid=cid: meter.in_container(p, cid))  # type: ignore[misc]
                out.append(meter.sample(h.key, h.data, cpu, st.memory_bytes, readings, sessions, measured))
        if procs:
            table = meter.read_procs()
            up = meter.uptime_s()
            by_session: dict[int, list[meter.ProcStat]] = {}
            for p in table:
                by_session.setdefault(p.session, []).append(p)
            for h in procs:
                sid = int(h.data["pid"])
                members = by_session.get(sid)
                if not members:
                    continue
                cpu_s = sum(p.cpu_s for p in members)
                leader = next((p for p in members if p.pid == sid), members[0])
                lifetime = max(1e-3, up - leader.start_s)
                cpu, measured = self._cpu.percent(h.key, cpu_s, now, 100.0 * cpu_s / lifetime)
                readings = gpu_readings(h.data, lambda p, sid=sid: meter.in_session(p, sid))  # type: ignore[misc]
                out.append(meter.sample(h.key, h.data, cpu, sum(p.rss_bytes for p in members), readings, None, measured))
        self._cpu.forget_except(h.key for h in handles)
        return out
