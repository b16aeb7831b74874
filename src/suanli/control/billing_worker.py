"""The server's billing thread: a rating run, then the budgets, every
``SUANLI_BILLING_INTERVAL_S`` seconds (default 10; 0 turns it off) and soon after
``wake()``.

Reads never rate (``GET /v1/billing/usage`` and ``/bill`` show what is posted, plus
the accruing estimate), so this thread is what makes usage appear. A run rates ended
work up to now (its end has committed, so it is seen) and running work's closed
periods once they are ``rater.SETTLE_MS`` old; the control loop wakes this thread when
a tick ended work (``ControlLoop.work_ended``), so a workload's final record is posted
a moment after the tick that saw it end. After each run ``admission.enforce_budgets``
applies billing's budget decision at the run's cutoff, now (alerts, the hard cap's
notice and stops). Runs are idempotent, so this thread, ``suanli rate`` and
``python -m suanli.billing rate`` may all run at once.

Call ``wake(after_s)`` when something billing should act on happened: a top-up (the
hard cap's notice clears at once), or work that ended (rated at once).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from suanli.billing import rater
from suanli.control.admission import enforce_budgets
from suanli.db.session import Database

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 10.0


class BillingWorker:
    def __init__(self, db: Database, interval_s: float | None = None) -> None:
        self.db = db
        env = os.environ.get("SUANLI_BILLING_INTERVAL_S")
        self.interval_s = (float(env) if env else DEFAULT_INTERVAL_S) if interval_s is None else interval_s
        self._halt = threading.Event()
        self._poke = threading.Event()
        self._lock = threading.Lock()
        self._due: float | None = None  # monotonic time a wake asked for a run
        self._thread: threading.Thread | None = None
        self.runs = 0

    def run_once(self) -> tuple[rater.RunResult | None, list[str]]:
        """One rating run, then the budgets at its cutoff; the run and the actions. A run
        that fails is logged and the budgets still act (at now): caps must not depend on
        every record rating cleanly."""
        try:
            res: rater.RunResult | None = rater.run(self.db)
        except Exception:
            log.exception("billing: rating run failed (the next run retries); budgets act anyway")
            res = None
        return res, enforce_budgets(self.db, None if res is None else res.cutoff_ms)

    def wake(self, after_s: float = 0.0) -> None:
        """Run now, or ``after_s`` seconds from now (the earliest asked for wins)."""
        due = time.monotonic() + max(0.0, after_s)
        with self._lock:
            self._due = due if self._due is None else min(self._due, due)
        self._poke.set()

    def _run(self) -> None:
        next_tick = time.monotonic() + self.interval_s
        while not self._halt.is_set():
            with self._lock:
                until = next_tick if self._due is None else min(next_tick, self._due)
            self._poke.wait(max(0.0, until - time.monotonic()))
            self._poke.clear()
            if self._halt.is_set():
                break
            now = time.monotonic()
            with self._lock:
                woken = self._due is not None and self._due <= now
                if woken:
                    self._due = None
            if not woken and now < next_tick:
                continue  # a wake for later: wait again
            try:
                self.run_once()
                self.runs += 1
            except Exception:
                log.exception("billing: rating run failed (the next run retries)")
            next_tick = time.monotonic() + self.interval_s

    def start(self) -> None:
        if self.interval_s > 0 and self._thread is None:
            self._halt.clear()
            self._thread = threading.Thread(target=self._run, name="suanli-billing", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop after the run in progress, if any (waits up to 30 s)."""
        self._halt.set()
        self._poke.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
