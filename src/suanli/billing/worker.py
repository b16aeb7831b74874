"""The server's billing thread: a rating run every ``SUANLI_BILLING_INTERVAL_S``
seconds (default 60; 0 turns it off), so usage, alerts and the hard cap follow
allocations without a cron job. Runs are idempotent, so this thread, API reads and
``python -m suanli.billing rate`` may all run at once."""

from __future__ import annotations

import logging
import os
import threading

from suanli.billing import rater
from suanli.db.session import Database

log = logging.getLogger(__name__)


class BillingWorker:
    def __init__(self, db: Database, interval_s: float | None = None) -> None:
        self.db = db
        self.interval_s = float(os.environ.get("SUANLI_BILLING_INTERVAL_S", "60")) if interval_s is None else interval_s
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs = 0

    def _run(self) -> None:
        while not self._halt.wait(self.interval_s):
            try:
                rater.run(self.db)
                self.runs += 1
            except Exception:
                log.exception("billing: rating run failed (the next run retries)")

    def start(self) -> None:
        if self.interval_s > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="suanli-billing", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
