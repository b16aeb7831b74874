"""Double-entry ledger, pure: entries are lists of postings that sum to zero.

Sign convention: a positive amount debits an account, a negative one credits it.
Accounts:

- ``cash``                      asset: money operators received (top-ups)
- ``tenant:<id>:prepaid``       liability: a tenant's prepaid balance (credit = funds)
- ``revenue:<what>``            income: gpu, storage, transfer, subscription
- ``refunds:subscription``      contra-revenue: pro-rata refunds of reserved terms

A tenant's balance is minus the sum of its prepaid account's postings. Every
entry carries a unique ``key`` (``topup:...``, ``charge:<run>:<batch>:<tenant>``,
``sub:<id>``, ``refund:<id>``): the store inserts it with a unique constraint,
so repeating an operation can never post it twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


class LedgerError(ValueError):
    pass


def prepaid(tenant_id: int) -> str:
    return f"tenant:{int(tenant_id)}:prepaid"


CASH = "cash"
REFUNDS = "refunds:subscription"


def revenue(what: str) -> str:
    return f"revenue:{what}"


@dataclass(frozen=True)
class Entry:
    key: str
    kind: str  # topup | charge | subscription | refund | adjustment
    tenant_id: int | None
    postings: tuple[tuple[str, int], ...]
    memo: str = ""
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not self.key:
            raise LedgerError("an entry needs a key")
        if len(self.postings) < 2:
            raise LedgerError(f"entry {self.key}: double entry needs at least two postings")
        if any(not isinstance(a, int) or isinstance(a, bool) for _, a in self.postings):
            raise LedgerError(f"entry {self.key}: amounts are integer micro-units")
        if sum(a for _, a in self.postings) != 0:
            raise LedgerError(f"entry {self.key}: postings do not balance")


def topup(key: str, tenant_id: int, amount: int, memo: str = "") -> Entry:
    if amount <= 0:
        raise LedgerError("a top-up must be positive")
    return Entry(key, "topup", tenant_id, ((CASH, amount), (prepaid(tenant_id), -amount)), memo or "top-up")


def charge(key: str, tenant_id: int, by_revenue: dict[str, int], memo: str = "") -> Entry | None:
    """One entry debiting the tenant for several revenue lines; None if all are zero."""
    lines = {k: v for k, v in by_revenue.items() if v}
    if any(v < 0 for v in lines.values()):
        raise LedgerError("charges are not negative; post a refund instead")
    total = sum(lines.values())
    if total == 0:
        return None
    posts = ((prepaid(tenant_id), total),) + tuple((revenue(k), -v) for k, v in sorted(lines.items()))
    return Entry(key, "charge", tenant_id, posts, memo or "usage charges")


def subscription(key: str, tenant_id: int, amount: int, memo: str) -> Entry:
    if amount <= 0:
        raise LedgerError("a subscription fee must be positive")
    return Entry(key, "subscription", tenant_id, ((prepaid(tenant_id), amount), (revenue("subscription"), -amount)), memo)


def refund(key: str, tenant_id: int, amount: int, memo: str) -> Entry:
    if amount <= 0:
        raise LedgerError("a refund must be positive")
    return Entry(key, "refund", tenant_id, ((REFUNDS, amount), (prepaid(tenant_id), -amount)), memo)


def balances(postings: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Net debit per account."""
    out: dict[str, int] = {}
    for acct, amount in postings:
        out[acct] = out.get(acct, 0) + amount
    return out


def tenant_balance(postings: Iterable[tuple[str, int]], tenant_id: int) -> int:
    """Funds left (positive) or owed (negative)."""
    acct = prepaid(tenant_id)
    return -sum(a for k, a in postings if k == acct)


def trial_balance(postings: Iterable[tuple[str, int]]) -> int:
    """Zero for any set of whole entries: the ledger balances."""
    return sum(a for _, a in postings)
