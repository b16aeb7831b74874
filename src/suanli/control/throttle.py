"""Failed attempts per key (a source address, a user name) in a sliding window: past the
limit, the key waits until its oldest failure leaves the window. What brute force of
tokens and passwords meets (``429`` with ``Retry-After``).

Kept in the database (``auth_failures``), so the limit is one limit for the whole server:
``suanli server`` runs several API worker processes (``api.supervisor``), and a count in
each one's memory would let an attacker make ``limit`` x workers guesses. Only failures
are written (rare, and each one prunes what left its window); a check is one indexed read.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import delete, select

from suanli.db.models import AuthFailure
from suanli.db.session import Database
from suanli.errors import DomainError


class Throttled(DomainError):
    """Too many failed attempts: try again in ``retry_after_s``."""

    code = "throttled"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Throttle:
    def __init__(self, db: Database, scope: str, limit: int, window_s: float, clock: Callable[[], float] = time.time) -> None:
        """``scope``: which throttle a row belongs to (``bad_tokens``, ``sign_ins``);
        ``clock``: Unix seconds (shared by every process, unlike a monotonic clock)."""
        self.db, self.scope, self.limit, self.window_s, self.clock = db, scope, limit, window_s, clock

    def check(self, key: str, what: str = "failed attempts") -> None:
        """Raise ``Throttled`` while ``key`` is over its limit."""
        now = self.clock()
        with self.db.reads() as s:
            recent = s.scalars(
                select(AuthFailure.at)
                .where(AuthFailure.scope == self.scope, AuthFailure.key == key[:300], AuthFailure.at > now - self.window_s)
                .order_by(AuthFailure.at.desc())
                .limit(self.limit)
            ).all()
        if len(recent) >= self.limit:
            wait = max(1, int(recent[-1] + self.window_s - now + 0.999))
            raise Throttled(f"too many {what} from here; try again in {wait} s", wait)

    def fail(self, key: str) -> None:
        now = self.clock()
        with self.db.transaction() as s:
            s.execute(delete(AuthFailure).where(AuthFailure.scope == self.scope, AuthFailure.at <= now - self.window_s))
            s.add(AuthFailure(scope=self.scope, key=key[:300], at=now))

    def forgive(self, key: str) -> None:
        with self.db.transaction() as s:
            s.execute(delete(AuthFailure).where(AuthFailure.scope == self.scope, AuthFailure.key == key[:300]))
