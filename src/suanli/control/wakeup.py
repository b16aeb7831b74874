"""Wake the control loop or the billing worker from another process: one datagram on a
unix socket in the data directory (0700, so only the server's user can send one).

``suanli server`` runs the API in processes apart from the loop (``api.supervisor``); a
create must still start the loop's pass at once rather than on its next tick. A datagram
is fire-and-forget: the sender never blocks or fails (no listener, a full queue: the loop's
interval picks the work up anyway), and the listener coalesces a burst into one wake.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

SOCKET_NAME = "wake.sock"
LOOP = b"loop"
BILLING = b"billing"
#: sun_path's size on Linux, less its terminating NUL
_MAX_PATH = 107


def socket_path(data_dir: Path) -> Path:
    return Path(data_dir) / SOCKET_NAME


def usable(path: Path) -> bool:
    return len(os.fsencode(path)) <= _MAX_PATH


class Sender:
    """The API's side: ``send(LOOP)`` after new or changed work."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self._sock: socket.socket | None = None
        if usable(path):
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.setblocking(False)

    def send(self, what: bytes) -> None:
        if self._sock is None:
            return
        try:
            self._sock.sendto(what, self.path)
        except OSError:  # no listener (the worker restarts) or its queue is full: the interval covers it
            pass

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()


class Listener:
    """The worker's side: a thread that calls ``handlers[message]()`` per datagram."""

    def __init__(self, path: Path, handlers: dict[bytes, Callable[[], None]]) -> None:
        self.path, self.handlers = Path(path), handlers
        self._halt = threading.Event()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not usable(self.path):
            log.warning("wake socket path %s is too long: the API's wakes fall back to the loop's interval", self.path)
            return
        self.path.unlink(missing_ok=True)  # a killed worker's socket
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(self.path))
        sock.settimeout(0.5)  # to see ``stop``
        self._sock = sock
        self._thread = threading.Thread(target=self._run, name="suanli-wake", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self._sock is not None
        while not self._halt.is_set():
            try:
                what = self._sock.recv(64)
            except TimeoutError:
                continue
            except OSError:
                if self._halt.is_set():
                    return
                raise
            handler = self.handlers.get(what)
            if handler is not None:
                handler()

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._sock is not None:
            self._sock.close()
            self.path.unlink(missing_ok=True)
