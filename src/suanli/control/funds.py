"""Prepaid enforcement, the control plane's half (billing decides: ``billing.funds``).

- ``check_start``: new work (an instance created or started, a job submitted) whose
  tenant cannot pay its first billing unit is refused before anything exists
  (``PaymentRequired``, HTTP 402, with the balance and the quote in the message).
- ``notice_unfunded`` (a loop phase): running work of a tenant whose funds are spent
  gets a notice of the tenant's grace period, as a spot victim does (SIGUSR1, the
  deadline file); a top-up within it withdraws the notice. Once it runs out the
  notices phase evicts with cause ``funds`` (``control.evict``): instances stop and keep
  their disk, jobs are requeued and resume from their checkpoint, and admission holds
  them until the balance covers them again. Nothing is lost.
"""

from __future__ import annotations

import logging

from sqlalchemy import or_
from sqlalchemy.orm import Session

from suanli.backends.base import Handle
from suanli.billing import funds
from suanli.control import workloads
from suanli.control.lifecycle import record_event
from suanli.control.notice import clear_notice, notice_of, notify
from suanli.control.plane import Plane
from suanli.control.scheduling import to_request
from suanli.db.models import Instance, Job
from suanli.errors import PaymentRequired

log = logging.getLogger(__name__)

#: ``notice_for`` of a notice given because the tenant's funds ran out
BENEFICIARY = "billing"


def check_start(s: Session, row: Instance | Job) -> None:
    """Refuse ``row`` (not yet committed) if its tenant cannot pay its first unit."""
    nodes = row.num_nodes if isinstance(row, Job) else 1
    disk = row.disk_gib if isinstance(row, Instance) else 0
    cost = funds.per_hour(s, to_request(row), nodes, disk, row.max_price_micros)
    why = funds.start_refusal(s, row.tenant_id, cost)
    if why is not None:
        raise PaymentRequired(why)


def notice_unfunded(plane: Plane) -> list[tuple[str, int]]:
    """Notice the running work of tenants out of funds; withdraw the notices of tenants
    that have topped up. Returns the work noticed now."""
    with plane.db.transaction() as s:
        short = {x.tenant_id: x for x in funds.out_of_funds(s, workloads.running_tenants(s))}
        # only the rows it may act on: a short tenant's, and those holding a funds notice
        running = workloads.running(s, lambda m: or_(m.tenant_id.in_(list(short)), m.notice_for == BENEFICIARY))
        todo = []
        for kind, row in running:
            notice = notice_of(row)
            if row.tenant_id in short and notice is None:
                todo.append((kind, row.id, [Handle.from_json(h) for h in row.handles or []], short[row.tenant_id]))
            elif row.tenant_id not in short and notice is not None and notice.beneficiary == BENEFICIARY:
                clear_notice(row)
                record_event(s, kind, row.id, "running", "running", "funds notice withdrawn: the balance covers it again")
    told = []
    for kind, wid, handles, shortfall in todo:
        node = ",".join(h.data.get("node", "") for h in handles if h.data.get("node")) or "its node"
        if notify(plane, kind, wid, handles, BENEFICIARY, node, why=shortfall.reason, notice_s=shortfall.grace_s):
            told.append((kind, wid))
    return told
