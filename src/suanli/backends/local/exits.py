"""Learn of a task's end the moment it happens, not at the control loop's next poll.

The control loop asks every running task's status every ``poll_interval_s``; a job that
waits on another (a pipeline) would then start up to a poll late. Linux hands out a
*pidfd* for any process we may see (``os.pidfd_open``, Linux 5.3): it turns readable
when that process exits, child or not, so one thread can wait on all of them in one
``select``. For a host process that is the task's wrapper; for a container, the
container's init process as the engine reports it. The watcher only says "something
ended": the loop then polls as usual, so nothing is decided from the watcher alone,
and a process it never saw (after a restart) is still found by the regular poll.
"""

from __future__ import annotations

import logging
import os
import selectors
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class ExitWatcher:
    """Calls ``on_exit`` (from its own thread) each time a watched process ends.

    The thread runs only while something is watched, so a backend that is never used,
    or whose tasks all ended, holds no thread."""

    def __init__(self) -> None:
        self.on_exit: Callable[[], None] | None = None
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, pid: int) -> bool:
        """Watch ``pid`` (0: a process that has ended already, told at once); False where
        it cannot be (nobody listens, no pidfds here): the regular poll then finds its end."""
        notify = self.on_exit
        if notify is None or not hasattr(os, "pidfd_open"):
            return False
        try:
            if pid <= 0:
                raise ProcessLookupError(pid)
            fd = os.pidfd_open(pid)
        except ProcessLookupError:  # ended before it could be watched (a task of milliseconds)
            self._tell(notify)
            return True
        except OSError:  # a kernel before 5.3
            return False
        with self._lock:
            self._selector.register(fd, selectors.EVENT_READ)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="suanli-exit-watcher", daemon=True)
                self._thread.start()
        return True

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._selector.get_map():
                    self._thread = None
                    return
            ended = self._selector.select(timeout=1.0)  # a timeout so newly registered fds are seen
            if not ended:
                continue
            with self._lock:
                for key, _ in ended:
                    self._selector.unregister(key.fd)
                    os.close(key.fd)
            notify = self.on_exit
            if notify is not None:
                self._tell(notify)

    @staticmethod
    def _tell(notify: Callable[[], None]) -> None:
        try:
            notify()
        except Exception:
            log.exception("exit callback failed")
