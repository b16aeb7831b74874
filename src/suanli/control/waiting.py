"""Why waiting work waits, as a machine-readable reason.

Every pending instance and queued job the control loop could not start carries a
``Reason``: a ``code`` a script can branch on and a ``detail`` for people. The
scheduling pass (``scheduling.schedule_pass``) and admission (``admission``) make
them; pipelines add ``dependency``. ``since`` (when the row first waited for this
code) is kept by the loop (``LoopStats.since``) and written with the reason to the
database, where the API's processes read both (``loop_report``); a reason that changes
code starts a new ``since``.

Codes:

- ``capacity``: no node has the free GPUs/CPU/memory now (detail: the filter that
  ruled out every node: ``gpu``, ``cpu``, ``memory``, ``gpu_model``,
  ``unschedulable``; then, where running work is noticed to make room for it, a spot
  reclaim or a migration, how much and by when: ``notice.making_room``); it starts when
  capacity frees up.
- ``gang``: one member fits somewhere, but not ``num_nodes`` of them at once.
- ``pinned-node``: the work is pinned to nodes (an operator's node verification) and
  none of them can take it now (detail: each node and why: ``busy (gpu)``,
  ``cordoned``, ``down or not run by this server``, ``not registered``).
- ``quota``: the tenant's grants do not admit it now.
- ``balance``: the tenant's prepaid balance or budget does not cover it.
- ``price-above-bid``: a spot bid below the spot price now.
- ``dependency``: a pipeline dependency has not finished.
- ``scheduling``: not yet judged by a scheduling pass (just submitted).
- ``never-fits``: nothing of the inventory could ever hold it (the row then fails
  with this reason rather than waiting; see ``scheduling.fail_never_fits``).
"""

from __future__ import annotations

from dataclasses import dataclass

CAPACITY = "capacity"
GANG = "gang"
PINNED = "pinned-node"
QUOTA = "quota"
BALANCE = "balance"
PRICE_ABOVE_BID = "price-above-bid"
DEPENDENCY = "dependency"
NEVER_FITS = "never-fits"
SCHEDULING = "scheduling"

CODES = (CAPACITY, GANG, PINNED, QUOTA, BALANCE, PRICE_ABOVE_BID, DEPENDENCY, NEVER_FITS, SCHEDULING)


@dataclass(frozen=True)
class Reason:
    code: str
    detail: str

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unknown waiting code {self.code!r}; one of {', '.join(CODES)}")

    def text(self) -> str:
        """The sentence shown as a workload's ``reason`` while it waits."""
        if self.code in (CAPACITY, GANG):
            return f"waiting for capacity ({self.detail})"
        if self.code == PINNED:
            return f"waiting for its pinned node ({self.detail})"
        if self.code == DEPENDENCY:
            return self.detail
        return f"waiting: {self.detail}"
