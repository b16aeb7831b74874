"""Failed attempts per key (a source address, a user name) in a sliding window: past the
limit, the key waits until its oldest failure leaves the window. What brute force of
tokens and passwords meets (``429`` with ``Retry-After``). Kept in memory: a server's
own view of the attempts it saw, which is the view that matters for one server; a
restart forgets it (and costs an attacker the restart's time)."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from suanli.errors import DomainError


class Throttled(DomainError):
    """Too many failed attempts: try again in ``retry_after_s``."""

    code = "throttled"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Throttle:
    def __init__(self, limit: int, window_s: float, clock: Callable[[], float] = time.monotonic, keys: int = 100_000) -> None:
        self.limit, self.window_s, self.clock, self.keys = limit, window_s, clock, keys
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> deque[float]:
        q = self._failures.get(key)
        if q is None:
            return deque()
        while q and q[0] <= now - self.window_s:
            q.popleft()
        if not q:
            del self._failures[key]
        return q

    def check(self, key: str, what: str = "failed attempts") -> None:
        """Raise ``Throttled`` while ``key`` is over its limit."""
        with self._lock:
            now = self.clock()
            q = self._recent(key, now)
            if len(q) >= self.limit:
                wait = max(1, int(q[0] + self.window_s - now + 0.999))
                raise Throttled(f"too many {what} from here; try again in {wait} s", wait)

    def fail(self, key: str) -> None:
        with self._lock:
            now = self.clock()
            if key not in self._failures and len(self._failures) >= self.keys:
                self._failures.clear()  # a flood of keys: start over rather than grow without bound
            q = self._recent(key, now)
            q.append(now)
            self._failures[key] = q
            while len(q) > self.limit:
                q.popleft()

    def forgive(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)
