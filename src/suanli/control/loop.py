"""The control loop: one background thread per server that owns every side effect.

A tick is a numbered recipe (as in Kueue's ``schedule()``):

1. reconcile running work with the backends (stops and cancels every tick,
   exits every ``poll_interval_s``), then run the plugged-in ``steps``;
2. schedule: place waiting work and claim allocations;
3. launch what was claimed, several at once (a container start is mostly waiting on the
   engine; rows are independent).

On start it first repairs what a previous (possibly killed) server left behind:
adopt or fail its in-flight launches, stop tasks nobody owns, recompute usage
counters. API handlers call ``wake()`` so new work does not wait for the next tick.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from suanli.backends.base import Backend
from suanli.control import reconcile
from suanli.control.launcher import fail_launch, launch, unclaim
from suanli.control.scheduling import PassMemo, PassResult, schedule_pass
from suanli.db.session import Database
from suanli.scheduler import make_policy

log = logging.getLogger(__name__)

#: Launches run at most this many at a time.
LAUNCH_WORKERS = 8


@dataclass
class LoopStats:
    ticks: int = 0
    launched: int = 0
    conflicts: int = 0
    policy_errors: int = 0
    last_tick_s: float = 0.0
    unplaced: dict[tuple[str, int], str] = field(default_factory=dict)


class ControlLoop:
    def __init__(
        self,
        db: Database,
        backends: dict[str, Backend],
        data_dir: Path,
        policy: str = "suanli",
        interval_s: float = 0.5,
        stop_grace_s: float = 10.0,
        poll_interval_s: float | None = None,
    ) -> None:
        self.db = db
        self.backends = backends
        self.data_dir = Path(data_dir)
        self.policy = make_policy(policy)
        #: places a request if ``policy`` raises on it (see ``schedule_pass``)
        self.fallback = make_policy("best_fit")
        self.interval_s = interval_s
        self.stop_grace_s = stop_grace_s
        #: how often every running task's status is asked of its backend (it costs
        #: O(running tasks)); stop and cancel requests are handled on every tick.
        self.poll_interval_s = 2 * interval_s if poll_interval_s is None else poll_interval_s
        self._last_poll = 0.0
        self._memo = PassMemo()
        #: Extra per-tick work other subsystems plug in (spot reclaim, backend health
        #: sync ...), run after reconcile and before scheduling; each failure is
        #: logged and does not stop the loop.
        self.steps: list[Callable[[], object]] = []
        #: identifies this process's claims; a fresh id per start, so claims of a
        #: killed predecessor are recognisably someone else's.
        self.owner = f"{uuid.uuid4().hex[:12]}"
        self.stats = LoopStats()
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._tick_lock = threading.Lock()

    def recover(self) -> None:
        """Repair after a previous server: run once before the first tick."""
        reconcile.adopt_or_fail_launches(self.db, self.backends, self.owner)
        reconcile.reconcile_running(self.db, self.backends, self.data_dir, self.stop_grace_s)
        reconcile.sweep_orphans(self.db, self.backends)
        reconcile.repair_counters(self.db)

    def tick(self) -> PassResult:
        with self._tick_lock:
            t0 = time.perf_counter()
            poll = time.monotonic() - self._last_poll >= self.poll_interval_s
            if poll:
                self._last_poll = time.monotonic()
            reconcile.reconcile_running(self.db, self.backends, self.data_dir, self.stop_grace_s, only_stops=not poll)  # 1
            for step in self.steps:  # 1b
                try:
                    step()
                except Exception:
                    log.exception("control loop step %r failed", step)
            result = schedule_pass(
                self.db, self.policy, list(self.backends), self.owner, memo=self._memo, fallback=self.fallback
            )  # 2
            if result.claimed:  # 3
                with ThreadPoolExecutor(
                    max_workers=min(LAUNCH_WORKERS, len(result.claimed)), thread_name_prefix="suanli-launch"
                ) as pool:
                    list(pool.map(lambda claim: self._launch(*claim), result.claimed))
            self.stats.ticks += 1
            self.stats.launched += len(result.claimed)
            self.stats.conflicts += result.conflicts
            self.stats.policy_errors += result.policy_errors
            self.stats.unplaced = result.unplaced or {}
            self.stats.last_tick_s = time.perf_counter() - t0
            if result.conflicts:
                self._wake.set()  # stale snapshot: try again at once
            return result

    def _launch(self, kind: str, wid: int) -> None:
        if self._halt.is_set():  # shutting down: leave it for the next start
            unclaim(self.db, kind, wid, self.owner)
            return
        try:
            launch(self.db, self.backends, kind, wid, self.owner, self.data_dir)
        except Exception as exc:
            log.exception("launching %s %s failed", kind, wid)
            fail_launch(self.db, kind, wid, self.owner, f"{type(exc).__name__}: {exc}")

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        try:
            self.recover()
        except Exception:
            log.exception("recovery failed")
        while not self._halt.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("control loop tick failed")
            self._wake.wait(self.interval_s)
            self._wake.clear()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="suanli-control-loop", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
