"""Every thread a server runs besides the API's own, listed in one place (dstack's
``scheduled_tasks`` is the model): what it does, how often, and how it starts and
stops. They start in this order and stop in reverse.

``suanli server`` runs them in the **worker** process, apart from the API's processes
(``api.supervisor``), which only serve HTTP; the port proxy has a process of its own.
A test's in-process server (``tests.control.control_helpers.LiveServer``) runs them all,
the port proxy included, in its own process.

================  ============================  =========================================
thread            every                         does
================  ============================  =========================================
control loop      ``--interval`` (0.5 s; 1 s    the tick: health, reconcile, failover,
                  with no work), and at once    notices, outbid, admit, preempt,
                  on ``wake()``                 schedule, launch (``control.loop``); its
                                                counters and waiting reasons written for
                                                the API (``control.loop_report``)
billing           10 s (``SUANLI_BILLING_       a rating run, then budgets and the hard
                  INTERVAL_S``), and on         cap (``control.billing_worker``)
                  ``wake()``
port proxy        a listener                    renters' published ports, one origin each
                                                (``api.proxy_app``); in-process servers
                                                only: ``suanli server`` gives it a process
audit retention   hour                          audit records past the retention deleted
                                                (``control.audit.prune``)
alerts            2 s                           alerts made from new events and billing
                                                notices; due webhook POSTs sent, retried
                                                with backoff (``control.alerts``)
metrics           ``--metrics-interval`` (15    every running workload's CPU, memory and
                  s)                            GPU sampled in one batched read, stored,
                                                downsampled and pruned; then idle
                                                auto-stop (``control.metrics``)
wakes             a datagram                    the API processes' wakes of the loop and
                                                billing (``control.wakeup``); worker only
================  ============================  =========================================
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from suanli.api.context import ServerContext
from suanli.control import alerts, audit, wakeup

if TYPE_CHECKING:
    import uvicorn

log = logging.getLogger(__name__)


@dataclass
class Background:
    name: str
    start: Callable[[], None]
    stop: Callable[[], None]


def background(
    ctx: ServerContext, start_proxy: Callable[[], uvicorn.Server] | None = None, *, wakes: bool = False
) -> list[Background]:
    """The server's threads in start order; ``start_proxy`` (in-process servers) starts the
    port proxy's listener and returns its uvicorn server; ``wakes``: listen for the API
    processes' wakes (the worker process)."""
    assert ctx.loop is not None and ctx.billing is not None
    proxy: list[uvicorn.Server] = []

    def open_proxy() -> None:
        assert start_proxy is not None
        proxy.append(start_proxy())

    def close_proxy() -> None:
        for server in proxy:
            server.should_exit = True

    listener = wakeup.Listener(wakeup.socket_path(ctx.data_dir), {wakeup.LOOP: ctx.loop.wake, wakeup.BILLING: ctx.billing.wake})
    return [
        Background("control loop", ctx.loop.start, ctx.loop.stop),
        Background("billing", ctx.billing.start, ctx.billing.stop),
        *([Background("port proxy", open_proxy, close_proxy)] if start_proxy is not None else []),
        periodic("audit retention", 3600.0, lambda: audit.prune(ctx.db, ctx.audit_retention_days)),
        periodic("alerts", 2.0, lambda: alerts.run(ctx.db, ctx.keyring)),
        *([Background("metrics", ctx.metrics.start, ctx.metrics.stop)] if ctx.metrics is not None else []),
        *([Background("wakes", listener.start, listener.stop)] if wakes else []),
    ]


def periodic(name: str, every_s: float, work: Callable[[], object]) -> Background:
    """A thread that does ``work`` at start and every ``every_s``; a failure is logged."""
    halt = threading.Event()

    def run() -> None:
        while not halt.is_set():
            try:
                work()
            except Exception:
                log.exception("%s failed (retried in %.0f s)", name, every_s)
            halt.wait(every_s)

    thread = threading.Thread(target=run, name=f"suanli-{name.replace(' ', '-')}", daemon=True)
    return Background(name, thread.start, halt.set)


def start_all(tasks: list[Background]) -> None:
    for t in tasks:
        t.start()


def stop_all(tasks: list[Background]) -> None:
    for t in reversed(tasks):
        t.stop()
