"""``suanli server``'s supervisor: start the server's parts as processes (``api.parts``:
worker, api, proxy), restart one that dies, stop them all on SIGTERM or Ctrl-C.

Why processes: the control loop, billing, metrics and the HTTP handlers used to share one
Python process, and under load the health check waited seconds for the GIL. Apart, the
API's workers only serve requests; they coordinate with the worker through the database
(as the loop's own threads always did) and wake it by datagram (``control.wakeup``).

A part says it is ready (its port bound, its threads started) by writing a byte on a
pipe the supervisor gave it (``READY_FD_ENV``, ``api.parts.ready``). A part that exits
on its first start before it is ready (a port in use, a bad setting) stops the server
with its exit code: restarting it would only repeat the error. Later, a part that dies is restarted after a backoff that doubles from ``BACKOFF_S`` to
``MAX_BACKOFF_S`` and starts over once it has run ``STEADY_S``; each restart is logged.
On SIGTERM or SIGINT every part gets SIGTERM and ``STOP_GRACE_S`` to finish (the worker
lets in-flight launches end, as the single process did), then SIGKILL.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("suanli.supervisor")

#: the environment variable naming the fd a part writes one byte to once it is ready
READY_FD_ENV = "SUANLI_READY_FD"
BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
STEADY_S = 60.0
STOP_GRACE_S = 40.0


@dataclass
class Part:
    name: str
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
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
        try:
            part.proc = subprocess.Popen(
                part.argv, env={**part.env, READY_FD_ENV: str(write)}, stdin=subprocess.DEVNULL, pass_fds=(write,)
            )
        finally:
            os.close(write)
        part._ready_pipe, part.ready = read, False
        part.started_at, part.restart_at = time.monotonic(), None
        part.starts += 1
        log.info("%s started (pid %d)", part.name, part.proc.pid)

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
            assert part.proc is not None
            code = part.proc.poll()
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
        live = [p.proc for p in self.parts if p.proc is not None and p.proc.poll() is None]
        for proc in live:
            try:
                proc.terminate()
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in live:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("pid %d did not stop in %.0f s: killed", proc.pid, STOP_GRACE_S)
                proc.kill()
                proc.wait()
        for p in self.parts:
            p.close_pipe()


def part(name: str, config_json: str, extra_env: dict[str, str] | None = None) -> Part:
    """A part as ``python -m suanli.api.parts NAME``, its settings in its environment."""
    env = dict(os.environ, SUANLI_PART_CONFIG=config_json, SUANLI_SUPERVISOR_PID=str(os.getpid()), **(extra_env or {}))
    return Part(name, [sys.executable, "-m", "suanli.api.parts", name], env)
