"""What every request handler needs, built once per server process (or per test).

The control loop and the billing worker are in this process only when a test builds
the server in-process (``api.server.build``); ``suanli server`` runs them in a worker
process of their own (``api.supervisor``), and what the API needs of them crosses
processes: wakes by a datagram (``control.wakeup``), the loop's counters and waiting
reasons through the database (``control.loop_report``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

from suanli.api.freshness import Freshness
from suanli.api.page_cache import PageCache
from suanli.backends.base import Backend
from suanli.control import loop_report, wakeup
from suanli.control.access import DEFAULT_PROXY_DOMAIN, port_url
from suanli.control.auth import TokenCache
from suanli.control.autostop import AutostopSettings
from suanli.control.billing_worker import BillingWorker
from suanli.control.loop import ControlLoop
from suanli.control.metrics import Collector
from suanli.control.secrets import Keyring
from suanli.control.throttle import Throttle
from suanli.control.waiting import Reason
from suanli.db.changes import ChangeWatch
from suanli.db.session import Database


@dataclass
class ServerContext:
    db: Database
    backends: dict[str, Backend]
    data_dir: Path
    loop: ControlLoop | None = None
    #: the billing thread (rating, then budgets); runs while the app serves (``api.app``)
    billing: BillingWorker | None = None
    #: the metrics thread (usage samples, their retention, idle auto-stop); ``api.background``
    metrics: Collector | None = None
    #: idle auto-stop: the platform's default window, the minimum, the activity thresholds
    autostop: AutostopSettings = field(default_factory=AutostopSettings)
    #: verified tokens, per process: a token revoked through another API worker stops
    #: working here within the cache's window (``TokenCache.ttl_s``)
    tokens: TokenCache = field(default_factory=TokenCache)
    #: pages of instances and jobs, per process, for a few seconds (``api.page_cache``:
    #: a page whose rows or billing changed is computed again)
    pages: PageCache = field(default_factory=PageCache)
    #: what the database saw committed, per tenant, as of each request (``api.freshness``):
    #: a kept page is answered without a read while nothing changing it was committed
    fresh: Freshness = field(init=False)
    #: bad bearer tokens per source address: 20 a minute, then 429 until the oldest leaves the
    #: window; in the database, one count for every API worker (``control.throttle``)
    bad_tokens: Throttle = field(init=False)
    #: failed sign-ins per user name and per source address: 10 in 15 minutes
    bad_sign_ins: Throttle = field(init=False)
    #: every state-changing call is recorded (``api.audit``); off only to measure its cost
    audit: bool = True
    #: audit records older than this are deleted (seed 004 keeps seven years)
    audit_retention_days: int = 7 * 365 + 2
    #: tenants other than the operator's may run on the process runtime (no isolation)
    allow_process_runtime: bool = False
    #: the host name renters' ``ssh`` reaches instances at
    ssh_host: str = "127.0.0.1"
    #: the largest job workdir upload, bytes
    max_upload_bytes: int = 100 << 20
    #: the port proxy's own listener (an origin apart from the console's); None: not served
    proxy_port: int | None = None
    #: every published port is served at ``ID-PORT.<proxy_domain>``, an origin of its own
    #: (``localhost``: browsers resolve ``*.localhost`` to loopback; else a wildcard DNS name)
    proxy_domain: str = DEFAULT_PROXY_DOMAIN
    #: served over TLS (``--tls-cert``): responses carry HSTS and cookies are ``Secure``
    tls: bool = False
    #: the command a node's verification job runs instead of ``suanli verify --json``
    #: (``control.verify_jobs``; ``$SUANLI_VERIFY_COMMAND``): it must leave the report in
    #: ``verify-report.json``; the tests stand in a recorded GPU for a physical one with it
    verify_command: str | None = None
    #: seals workloads' secrets (``control.secrets``); its key file is outside the database
    keyring: Keyring = field(kw_only=True)
    #: wakes the loop and billing in the worker process (None: they are in this process, or none runs)
    waker: wakeup.Sender | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        watch = ChangeWatch(self.db)
        self.fresh = Freshness(watch)
        self.db.keep_catalog(watch)  # the catalog read once per process while unchanged (``db.kept``)
        self.bad_tokens = Throttle(self.db, "bad_tokens", 20, 60.0)
        self.bad_sign_ins = Throttle(self.db, "sign_ins", 10, 900.0)

    def port_url(self, request_base: str, instance_id: int, port: int) -> str:
        """The URL of a published port, in the scheme the caller reached this server with."""
        parts = urlsplit(request_base)
        return port_url(
            parts.scheme or "http",
            self.proxy_domain,
            self.proxy_port if self.proxy_port is not None else parts.port,
            instance_id,
            port,
        )

    def waiting(self, kind: str, workload_ids: list[int]) -> dict[int, tuple[Reason, datetime | None]]:
        """Why the last scheduling pass (or admission) left these rows waiting, and since
        when each waits for that code, for the rows the pass saw (``control.waiting``):
        one query, whichever process the loop runs in."""
        return loop_report.waiting(self.db, kind, workload_ids)

    def waiting_reasons(self, kind: str, workload_ids: list[int]) -> dict[int, str]:
        """The same as the sentences shown as waiting rows' ``reason``."""
        return {i: reason.text() for i, (reason, _) in self.waiting(kind, workload_ids).items()}

    def wake(self) -> None:
        """New or changed work: let the control loop act now rather than next tick."""
        if self.loop is not None:
            self.loop.wake()
        elif self.waker is not None:
            self.waker.send(wakeup.LOOP)

    def wake_billing(self) -> None:
        """Balances or budgets changed: let the billing worker run now."""
        if self.billing is not None:
            self.billing.wake()
        elif self.waker is not None:
            self.waker.send(wakeup.BILLING)
