"""Notice expiry: a spot victim whose notice deadline passed gets SIGTERM (then
KILL after the grace period), its allocation is released and it is requeued
(instances: ``preempted`` then ``pending``) to resume when capacity returns (and,
for an outbid one, when admission finds the price at or below its bid again). Work
noticed because its tenant's funds ran out (``control.funds``) leaves the same way,
except that an instance stops (its disk kept) until its owner starts it again; so does
an instance noticed for idleness (``control.autostop``). A job
that ends during its notice is due at once (``reconcile`` moves its deadline to now).
"""

from __future__ import annotations

import re

from suanli.control import workloads
from suanli.control.autostop import BENEFICIARY as IDLE
from suanli.control.evict import evict
from suanli.control.funds import BENEFICIARY as FUNDS
from suanli.control.notice import notice_of
from suanli.control.plane import Plane

#: How much earlier than its own deadline a victim may be evicted with its siblings
#: (noticed for the same beneficiary; see ``expire_notices``).
SIBLING_SLACK_S = 1.0


def expire_notices(plane: Plane) -> list[tuple[str, int]]:
    """Evict spot victims whose notice ran out.

    The victims noticed for one beneficiary leave together: their deadlines differ by
    the milliseconds between their notices, and one leaving a pass before the others
    would let the scheduling pass in between give its capacity back to spot work
    before the beneficiary (a gang needing every victim's node) fits; that repeats
    forever. A sibling due within ``SIBLING_SLACK_S`` is evicted with the first."""
    now = plane.clock.now()
    noticed = []
    with plane.db.transaction() as s:
        for kind, row in workloads.running(s):
            notice = notice_of(row)
            if notice is not None:
                noticed.append((kind, row.id, notice))
    expiring = {n.beneficiary for _, _, n in noticed if n.deadline <= now}
    due = [
        (kind, wid, n)
        for kind, wid, n in noticed
        if n.deadline <= now or (n.beneficiary in expiring and n.deadline <= now + SIBLING_SLACK_S)
    ]
    done = []
    for kind, wid, notice in due:
        ended = "it ended during its notice" if notice.ended_early else "expired"
        why = f"{notice.reason}: notice of {notice.notice_s:.0f}s {ended}"
        cause = "funds" if notice.beneficiary == FUNDS else "idle" if notice.beneficiary == IDLE else "reclaim"
        if evict(plane, kind, wid, cause, why, _workload(notice.beneficiary)):
            plane.stats.reclaimed += 1
            done.append((kind, wid))
    return done


def _workload(beneficiary: str) -> str | None:
    """The waiting work a notice was given for (``job-7``), or None for the other
    reasons (``price``, funds, idleness)."""
    return beneficiary if re.fullmatch(r"(job|instance)-\d+", beneficiary) else None
