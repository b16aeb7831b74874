"""``suanli server``'s supervisor: run the server's parts as processes (``api.parts``:
the worker, the API's workers, the port proxy), restart one that dies, stop them all on
SIGTERM or Ctrl-C.

Why processes: the control loop, billing, metrics and the HTTP handlers used to share one
Python process, and under load the health check waited seconds for the GIL. Apart, the
API's workers only serve requests; they coordinate with the worker through the database
(as the loop's own threads always did) and wake it by datagram (``control.wakeup``).

Parts are forked from the supervisor, which has imported the server's code and holds
no thread or database connection when it forks: a part starts in milliseconds rather than
the seconds a fresh interpreter spends importing (more on a loaded machine), and so does a
restart. Each part builds its own context (database engine, backends) after the fork.

A part says it is ready (its threads started, its app loaded) by writing a byte on a
pipe. A part that exits on its first start before it is ready (a bad setting, a database
that refuses it) stops the server with its exit code: restarting it would only repeat
the error. Later, a part that dies is restarted after a backoff that doubles from
``BACKOFF_S`` to ``MAX_BACKOFF_S`` and starts over once it has run ``STEADY_S``; each exit
and restart is logged. On SIGTERM or SIGINT every part gets SIGTERM and ``STOP_GRACE_S`` to
finish (the worker lets in-flight launches end, as the single process did), then SIGKILL.
A part dies with the supervisor (``PR_SET_PDEATHSIG``): a supervisor killed with
``kill -9`` takes its parts down, as the single process it replaced went down whole.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("suanli.supervisor")

BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
STEADY_S = 60.0
STOP_GRACE_S = 40.0


@dataclass
class Part:
    """A process of the server: ``run(ready)`` is its whole life in the forked child
    (``ready()`` once it is up); its name is the process's (``/proc/PID/comm``, ``ps``)."""

    name: str
    run: Callable[[Callable[[], None]], object]
    pid: int | None = None
    started_at: float = 0.0
    starts: int = 0
    backoff_s: float = BACKOFF_S
    restart_at: float | None = None  #: when a dead part starts again
    exits: list[int] = field(default_factory=list)
    ready: bool = False  #: said so since its last start
    _ready_pipe: int | None = None

    def poll_ready(self) -> bool:
        if not self.ready and self._ready_pipe is not None:
            try:
                self.ready = bool(os.read(self._ready_pipe, 1))
            except BlockingIOError:
                pass
        return self.ready

    def close_pipe(self) -> None:
        if self._ready_pipe is not None:
            os.close(self._ready_pipe)
            self._ready_pipe = None


class Supervisor:
    def __init__(self, parts: list[Part], echo: Callable[[str], object] = print) -> None:
        self.parts, self.echo = parts, echo
        self._stopping = False

    def _start(self, part: Part) -> None:
        part.close_pipe()
        read, write = os.pipe()
        os.set_blocking(read, False)
        supervisor = os.getpid()
        # what the supervisor built (the server's imports) leaves the collector's sight before
        # the fork: a part's collections then skip it instead of writing to every inherited
        # object, which copied the whole heap page by page (80 ms of a part's start, and its
        # memory no longer shared with the supervisor's)
        gc.freeze()
        pid = os.fork()
        if pid == 0:  # the part
            os.close(read)
            _child(part, write, supervisor)
        os.close(write)
        part.pid, part._ready_pipe, part.ready = pid, read, False
        part.started_at, part.restart_at = time.monotonic(), None
        part.starts += 1
        log.info("%s started (pid %d)", part.name, pid)

    def _signalled(self, signum: int, _frame: object) -> None:
        self._stopping = True

    def run(self) -> int:
        """Start every part and watch them until a stop signal; returns the exit status."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._signalled)
        status = 0
        try:
            for part in self.parts:
                self._start(part)
            while not self._stopping:
                time.sleep(0.2)
                failed = self._watch()
                if failed is not None:
                    status = failed
                    break
        finally:
            self.stop()
        return status

    def _watch(self) -> int | None:
        now = time.monotonic()
        for part in self.parts:
            if part.restart_at is not None:
                if now >= part.restart_at and not self._stopping:
                    self._start(part)
                continue
            if part.pid is None:
                continue
            code = _reap(part)
            ready = part.poll_ready()
            if code is None:
                if now - part.started_at >= STEADY_S:
                    part.backoff_s = BACKOFF_S
                continue
            part.exits.append(code)
            ran = now - part.started_at
            if part.starts == 1 and not ready:
                self.echo(f"suanli server: the {part.name} process exited at start (code {code}); stopping")
                return code or 1
            log.warning("%s exited with code %s after %.0f s; restarting in %.1f s", part.name, code, ran, part.backoff_s)
            part.restart_at = now + part.backoff_s
            part.backoff_s = min(MAX_BACKOFF_S, part.backoff_s * 2)
        return None

    def stop(self) -> None:
        """SIGTERM to every running part, then SIGKILL to what is left after the grace."""
        self._stopping = True
        live = [p for p in self.parts if p.pid is not None]
        for p in live:
            assert p.pid is not None
            os.kill(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for p in live:
            while p.pid is not None and _reap(p) is None:
                if time.monotonic() > deadline:
                    log.warning("%s (pid %s) did not stop in %.0f s: killed", p.name, p.pid, STOP_GRACE_S)
                    os.kill(p.pid, signal.SIGKILL)
                    os.waitpid(p.pid, 0)
                    p.pid = None
                    break
                time.sleep(0.05)
        for p in self.parts:
            p.close_pipe()


def _reap(part: Part) -> int | None:
    """The part's exit status once it has ended (negative: the signal that ended it, as
    ``subprocess`` says), else None; a reaped part's ``pid`` is None."""
    if part.pid is None:
        return None
    try:
        pid, status = os.waitpid(part.pid, os.WNOHANG)
    except ChildProcessError:
        part.pid = None
        return 0
    if pid == 0:
        return None
    part.pid = None
    return os.waitstatus_to_exitcode(status)


def _child(part: Part, ready_fd: int, supervisor: int) -> None:
    """The forked part: its own name and signals, dead with its parent, then ``part.run``."""
    code = 0
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _die_with_parent(supervisor)
        _set_name(f"suanli-{part.name}")

        def ready() -> None:
            try:
                os.write(ready_fd, b"1")
                os.close(ready_fd)
            except OSError:
                pass

        part.run(ready)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        log.exception("%s failed", part.name)
        code = 1
    finally:
        logging.shutdown()
        os._exit(code)


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when the supervisor dies (Linux), and exit now if it has."""
    libc = _libc()
    if libc is not None and hasattr(libc, "prctl"):
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _set_name(name: str) -> None:
    """The process's name as ``ps`` and ``top`` show it (15 bytes)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "prctl"):
        libc.prctl(15, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)  # PR_SET_NAME
