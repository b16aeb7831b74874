"""A tenant's payment terms as the money rules read them (``billing_terms`` rows).

Kept apart from ``funds`` so that rating (``debt``) can read them without importing the
rules that themselves read rating's figures.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from suanli.billing.tables import DEFAULT_GRACE_S, DEFAULT_STORAGE_DEBT_MICROS, TermsRow


@dataclass(frozen=True)
class Terms:
    tenant_id: int
    terms: str = "prepaid"
    credit_limit: int = 0  # micro-units the balance may go below zero (credit terms)
    grace_s: int = DEFAULT_GRACE_S
    low_balance: int | None = None  # alert when what is left drops below this
    low_alerted: bool = False
    storage_debt_limit: int = DEFAULT_STORAGE_DEBT_MICROS  # see ``billing.debt``

    def left(self, bal: int, accruing: int) -> int | None:
        """What the tenant may still spend; None when post-paid (no limit)."""
        if self.terms == "postpaid":
            return None
        return bal - accruing + (self.credit_limit if self.terms == "credit" else 0)

    def storage_floor(self) -> int | None:
        """The lowest balance a stopped disk's storage may take the tenant to; None when
        post-paid (no floor)."""
        if self.terms == "postpaid":
            return None
        return -(self.storage_debt_limit + (self.credit_limit if self.terms == "credit" else 0))


def terms_of(s: Session, tenant_ids: Iterable[int]) -> dict[int, Terms]:
    """Each tenant's terms; a tenant without a row is prepaid with the defaults."""
    ids = set(tenant_ids)
    out = {t: Terms(t) for t in ids}
    if not ids:
        return out
    for r in s.scalars(select(TermsRow).where(TermsRow.tenant_id.in_(ids))):
        out[r.tenant_id] = Terms(
            r.tenant_id,
            r.terms,
            r.credit_limit_micros,
            r.grace_s,
            r.low_balance_micros,
            r.low_alerted,
            r.storage_debt_limit_micros,
        )
    return out
