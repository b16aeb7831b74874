"""Where the control plane acts on billing's decisions, each in one explicit step.

- **Admission** (the loop's admit phase): ``admit(session, work)`` asks
  ``billing.admission.decide`` which waiting work is held (a grant's GPUs in use, a
  hard cap, a bid below the spot price), rejected (no grant can ever admit it) or
  narrowed (a spot bid only some allowed models meet), and fails the rejected rows in
  the caller's transaction. ``Admission.admitted(work)`` is what may be placed.
- **The hard cap** (the billing worker, after each rating run): ``enforce_budgets``
  asks ``billing.spending.apply_budgets`` for its decision (alerts and notices are
  billing's to write) and stops the tenants it names through the instance and job
  services, as their owner would; then the low-balance alerts (``billing.funds``).
  Prepaid balances running out are the loop's ``funds`` phase (``control.funds``).

Billing never changes a workload; only this module turns its answers into stops and
failures.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from suanli.billing import funds
from suanli.billing.admission import Decision, Key, decide
from suanli.billing.spending import apply_budgets
from suanli.control import instances, jobs, workloads
from suanli.control.auth import Principal
from suanli.control.waiting import QUOTA, Reason
from suanli.db.session import Database

log = logging.getLogger(__name__)

W = TypeVar("W", bound=Any)


@dataclass
class Admission(Decision):
    """Billing's answer for one pass: ``held`` and ``rejected`` ``{(kind, id): reason}``,
    ``narrowed`` ``{(kind, id): models}``."""

    def reasons(self) -> dict[Key, Reason]:
        """What is held, as waiting reasons (``control.waiting``)."""
        return {k: Reason(self.codes.get(k, QUOTA), why) for k, why in self.held.items()}

    def admitted(self, work: Sequence[W]) -> list[W]:
        """``work`` less what is held or rejected, in its order; a narrowed spot bid is
        placed on its affordable models only (the price checked is the price of the
        model it lands on)."""
        out = []
        for w in work:
            key = (w.kind, w.id)
            if key in self.held or key in self.rejected:
                continue
            if key in self.narrowed:
                w = replace(w, request=replace(w.request, gpu_models=self.narrowed[key]))
            out.append(w)
        return out


def admit(s: Session, work: Sequence, at_ms: int | None = None) -> Admission:
    """Judge waiting ``work`` (items with ``kind``, ``id``, ``request``, ``num_nodes``)
    and fail what can never run, in ``s``."""
    d = decide(s, work, at_ms)
    out = Admission(d.held, d.rejected, d.narrowed, d.codes)
    fail_rejected(s, out.rejected)
    return out


def fail_rejected(s: Session, rejected: dict[Key, str]) -> None:
    """Fail rows no grant can ever admit (still waiting), with the reason."""
    for (kind, wid), reason in rejected.items():
        row = workloads.get(s, kind, wid)
        if row is not None and row.state in ("pending", "queued"):
            workloads.end(s, row, "failed", reason)


def stop_tenant(db: Database, tenant_id: int) -> None:
    """Stop running instances and cancel active jobs through the control plane's services."""
    who = Principal(0, tenant_id, "billing", "admin")
    with db.sessions() as s:
        active = workloads.active_of_tenant(s, tenant_id)
    insts = [wid for kind, wid in active if kind == "instance"]
    js = [wid for kind, wid in active if kind == "job"]
    for i in insts:
        try:
            instances.stop(db, who, i)
        except Exception as exc:  # a concurrent change: the next run retries
            log.warning("hard cap: cannot stop instance %s: %s", i, exc)
    for j in js:
        try:
            jobs.cancel(db, who, j)
        except Exception as exc:
            log.warning("hard cap: cannot cancel job %s: %s", j, exc)


def enforce_budgets(db: Database, at_ms: int | None = None) -> list[str]:
    """Billing's budget decision at ``at_ms`` (default now), then the stops it asks
    for; returns its actions as text (``tenant 3: alert 80 %``, ``tenant 3: stop``)."""
    run = apply_budgets(db, at_ms)
    for tid in run.stop:
        stop_tenant(db, tid)
    with db.transaction() as s:
        low = funds.low_balance_alerts(s, at_ms)
    return run.actions + low
