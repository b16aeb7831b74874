"""A tenant's payment terms as the money rules read them (``billing_terms`` rows).

Kept apart from ``funds`` so that rating (``debt``) can read them without importing the
rules that themselves read rating's figures.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from types import MappingProxyType

from sqlalchemy import select
from sqlalchemy.orm import Session

from suanli.billing.tables import DEFAULT_GRACE_S, DEFAULT_STORAGE_DEBT_MICROS, TermsRow
from suanli.db.kept import kept_whole


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
    """Each tenant's terms; a tenant without a row is prepaid with the defaults. Every
    tenant's row is kept while the catalog is unchanged (``db.kept``)."""
    ids = set(tenant_ids)
    every = kept_whole(s, "terms", lambda s: MappingProxyType(_read(s, None)))
    if every is not None:
        return {t: every.get(t) or Terms(t) for t in ids}
    return {t: Terms(t) for t in ids} | (_read(s, ids) if ids else {})


def _read(s: Session, ids: set[int] | None) -> dict[int, Terms]:
    """The rows of ``ids`` (None: every row)."""
    q = select(TermsRow) if ids is None else select(TermsRow).where(TermsRow.tenant_id.in_(ids))
    return {
        r.tenant_id: Terms(
            r.tenant_id,
            r.terms,
            r.credit_limit_micros,
            r.grace_s,
            r.low_balance_micros,
            r.low_alerted,
            r.storage_debt_limit_micros,
        )
        for r in s.scalars(q)
    }
