"""Billing I/O: price versions, ledger entries, top-ups, balances, grants, budgets,
subscriptions and transfers. Every write is one transaction; a refused request
raises ``BillingError`` (mapped to HTTP 4xx) and changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import bindparam, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from suanli import gpu_names
from suanli.billing import ledger, plans, price_versions
from suanli.billing.money import MoneyError, fmt, to_micros
from suanli.billing.pricebook import BOOK_FIELDS, PriceBook, PriceBookError, resolve_model
from suanli.billing.quotas import QOS_RANK
from suanli.billing.tables import (
    DEFAULT_GRACE_S,
    DEFAULT_STORAGE_DEBT_MICROS,
    TERMS,
    BudgetChange,
    BudgetRow,
    Grant,
    LedgerEntry,
    Posting,
    PriceVersion,
    Subscription,
    TermsRow,
    Transfer,
)
from suanli.bounds import parse_id
from suanli.clock import SYSTEM
from suanli.db import keyset
from suanli.db.models import Node, Tenant
from suanli.db.session import Database
from suanli.errors import Conflict, Forbidden, Invalid, NotFound


class BillingError(Invalid):
    code = "billing_invalid"


def now_ms() -> int:
    return SYSTEM.now_ms()  # suanli.clock: one clock for live and sim


def ms_to_dt(ms: int) -> datetime:

    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def dt_to_ms(dt: datetime) -> int:

    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


# -- price versions (reads: price_versions.py) ----------------------------------------------
def priced_model(s: Session, book: PriceBook, name: str) -> str:
    """The model a price is for: one the book prices (any spelling), else one a node
    registered, else a catalog GPU (by the catalog's name); a name that is none of these
    is a typo, refused with the choices rather than priced as a new GPU nobody has."""
    if resolve_model(name, tuple(book.gpus)) is not None:
        return name
    registered = tuple(sorted(set(s.scalars(select(Node.gpu_model).distinct()))))
    hit = gpu_names.lookup(name, registered) or gpu_names.canonical_or_none(name)
    if hit is None:
        known = ", ".join(sorted({*book.gpus, *registered}))
        raise BillingError(f"unknown GPU model {name!r}; choose one of: {known} (or any GPU of the catalog)")
    return hit


def set_price(
    db: Database, author: str, model: str | None, plan: str, value: str, note: str = "", effective_ms: int | None = None
) -> int:
    """A new version with one price changed, effective now (or later); returns its id."""
    with db.transaction() as s:
        _, book = price_versions.current_book(s)
        if model is not None and plan.replace("-", "_") not in BOOK_FIELDS:
            model = priced_model(s, book, model)
        try:
            new = book.with_price(model, plan, value, note or f"set by {author}")
        except (PriceBookError, MoneyError) as exc:
            raise BillingError(str(exc)) from None
        eff = now_ms() if effective_ms is None else effective_ms
        row = PriceVersion(
            effective_ms=eff, author=author, note=note or f"{model or 'book'} {plan} = {value}", book=new.to_dict()
        )
        s.add(row)
        s.flush()
        price_versions.forget(s)
        return row.id


# -- ledger --------------------------------------------------------------------------------
def post_entry(s: Session, e: ledger.Entry) -> bool:
    """Insert an entry and its postings unless its key exists; True if posted."""
    if s.scalar(select(LedgerEntry.id).where(LedgerEntry.key == e.key)) is not None:
        return False
    try:
        with s.begin_nested():
            row = LedgerEntry(key=e.key, kind=e.kind, tenant_id=e.tenant_id, memo=e.memo)
            s.add(row)
            s.flush()
            s.add_all([Posting(entry_id=row.id, account=a, amount=v) for a, v in e.postings])
            s.flush()
    except IntegrityError:  # a concurrent writer posted the same key first
        return False
    return True


def post_entries(s: Session, entries: list[ledger.Entry]) -> int:
    """Many entries at once (a rating batch): one lookup of existing keys, bulk inserts.
    A concurrent writer's duplicate key rolls the savepoint back and falls back to
    one entry at a time. Returns how many were posted."""
    if not entries:
        return 0
    existing = set(s.scalars(select(LedgerEntry.key).where(LedgerEntry.key.in_([e.key for e in entries]))))
    new = [e for e in entries if e.key not in existing]
    if not new:
        return 0
    try:
        with s.begin_nested():
            rows = [LedgerEntry(key=e.key, kind=e.kind, tenant_id=e.tenant_id, memo=e.memo) for e in new]
            s.add_all(rows)
            s.flush()
            s.add_all([Posting(entry_id=r.id, account=a, amount=v) for r, e in zip(rows, new) for a, v in e.postings])
            s.flush()
        return len(new)
    except IntegrityError:
        return sum(post_entry(s, e) for e in new)


def balance(s: Session, tenant_id: int) -> int:
    return balances(s, [tenant_id])[tenant_id]


#: built once (a create's funds check and every admission pass read balances)
_BALANCES = (
    select(Posting.account, func.sum(Posting.amount))
    .where(Posting.account.in_(bindparam("accounts", expanding=True)))
    .group_by(Posting.account)
)


def balances(s: Session, tenant_ids: Iterable[int]) -> dict[int, int]:
    """Prepaid balances of many tenants in one statement (the control loop asks for every
    tenant with waiting or running work)."""
    accounts = {ledger.prepaid(t): t for t in set(tenant_ids)}
    out = dict.fromkeys(accounts.values(), 0)
    for account, total in s.connection().execute(_BALANCES, {"accounts": list(accounts)}):  # plain rows: no ORM handling
        out[accounts[account]] = -int(total or 0)
    return out


def trial_balance(s: Session) -> int:
    return int(s.scalar(select(func.coalesce(func.sum(Posting.amount), 0))) or 0)


def find_tenant(s: Session, tenant: str | int) -> int | None:
    """The id of the tenant ``tenant`` names (its id, else its name), or None: digits are
    read by ``bounds.parse_id`` (ASCII only, within the id range: "²" and 2**64 are names,
    of no tenant, rather than a ValueError or an overflow)."""
    text = str(tenant)
    n = parse_id(text)
    row = s.get(Tenant, n) if n is not None else s.scalar(select(Tenant).where(Tenant.name == text))
    return None if row is None else row.id


def tenant_id_of(s: Session, tenant: str | int) -> int:
    tid = find_tenant(s, tenant)
    if tid is None:
        raise NotFound(f"no tenant {str(tenant)!r}")
    return tid


def topup(db: Database, tenant: str | int, amount: str, key: str | None = None, memo: str = "") -> tuple[bool, int]:
    """Credit a tenant's prepaid balance. A repeated ``key`` posts nothing (returns False)."""
    try:
        micros = to_micros(amount)
    except MoneyError as exc:
        raise BillingError(f"amount: {exc}") from None
    if micros <= 0:
        raise BillingError("amount: a top-up must be positive")
    with db.transaction() as s:
        tid = tenant_id_of(s, tenant)
        posted = post_entry(s, ledger.topup(f"topup:{key or uuid.uuid4().hex}", tid, micros, memo))
        return posted, balance(s, tid)


# -- grants --------------------------------------------------------------------------------
@dataclass(frozen=True)
class GrantSpec:
    tenant: str
    gpu_model: str | None
    max_gpus: float
    gpu_minutes: int | None
    qos: str
    expires_at: datetime | None


def create_grant(db: Database, spec: GrantSpec) -> Grant:
    if spec.qos not in QOS_RANK:
        raise BillingError(f"qos: choose one of {', '.join(QOS_RANK)}")
    if spec.max_gpus <= 0 or (spec.gpu_minutes is not None and spec.gpu_minutes < 0):
        raise BillingError("max_gpus must be positive and gpu_minutes not negative")
    with db.transaction() as s:
        row = Grant(
            tenant_id=tenant_id_of(s, spec.tenant),
            gpu_model=grant_model(s, spec.gpu_model),
            max_gpu_milli=int(round(spec.max_gpus * 1000)),
            gpu_minutes=spec.gpu_minutes,
            qos=spec.qos,
            expires_at=spec.expires_at,
        )
        s.add(row)
        s.flush()
        return row


def grant_model(s: Session, name: str | None) -> str | None:
    """A grant's model as a node registered it (``a100`` -> ``A100-80G``), so the grant
    lists the name the platform shows; a catalog GPU no node has yet keeps the catalog's
    name; anything else is refused with the choices (a grant for a typo covers nothing)."""
    if not name:
        return None
    registered = tuple(sorted(set(s.scalars(select(Node.gpu_model).distinct()))))
    hit = gpu_names.lookup(name, registered) or gpu_names.canonical_or_none(name)
    if hit is None:
        raise BillingError(f"gpu_model: unknown GPU model {name!r}; choose one of: {', '.join(registered) or 'none registered'}")
    return hit


def list_grants(db: Database, tenant_id: int | None = None, page: keyset.Page | None = None) -> list[Grant]:
    """Grants in force by id; ``page``: one page (``db.keyset``: one more when more follow)."""
    with db.sessions() as s:
        q = select(Grant).where(Grant.revoked.is_(False))
        if tenant_id is not None:
            q = q.where(Grant.tenant_id == tenant_id)
        return list(s.scalars(keyset.select_page(q, [Grant.id], page)))


def revoke_grant(db: Database, grant_id: int) -> None:
    with db.transaction() as s:
        row = s.get(Grant, grant_id)
        if row is None:
            raise NotFound(f"no grant {grant_id}")
        row.revoked = True


# -- budgets -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Editor:
    """Who changes a budget: an operator's budget is a floor a member may only tighten."""

    name: str
    role: str  # admin | operator | member

    @property
    def operator(self) -> bool:
        return self.role in ("admin", "operator")


def _budget_doc(row: BudgetRow | None) -> dict | None:
    if row is None:
        return None
    return {
        "limit_micros": row.limit_micros,
        "thresholds": list(row.thresholds or []),
        "hard_cap": row.hard_cap,
        "notice_s": row.notice_s,
    }


def _looser(floor: dict, limit: int | None, hard_cap: bool, notice_s: int) -> str | None:
    """How a member's budget would loosen the operator's ``floor``, or None."""
    if floor.get("hard_cap") and not hard_cap:
        return "turn off the hard cap"
    if floor.get("limit_micros") is not None and (limit is None or limit > floor["limit_micros"]):
        return f"raise or remove the limit of {fmt(floor['limit_micros'])}"
    if floor.get("hard_cap") and notice_s > floor.get("notice_s", notice_s):
        return f"lengthen the notice beyond {floor['notice_s']} s"
    return None


def set_budget(
    db: Database,
    tenant: str | int,
    limit: str | None,
    thresholds: list[int],
    hard_cap: bool,
    notice_s: int,
    editor: Editor = Editor("operator", "operator"),
) -> BudgetRow:
    """Set a tenant's budget. An operator's budget becomes the floor; a member may set a
    stricter one of their own (never looser than that floor). Every change is recorded
    with who made it (``billing_budget_changes``)."""
    if any(not 0 < t <= 1000 for t in thresholds):
        raise BillingError("thresholds are percentages between 1 and 1000")
    if notice_s < 0:
        raise BillingError("notice_s must not be negative")
    try:
        micros = to_micros(limit) if limit is not None else None
    except MoneyError as exc:
        raise BillingError(f"limit: {exc}") from None
    with db.transaction() as s:
        tid = tenant_id_of(s, tenant)
        row = s.get(BudgetRow, tid, with_for_update=True)
        before = _budget_doc(row)
        if row is None:
            row = BudgetRow(tenant_id=tid, alerted=[], period="")
        if not editor.operator and row.operator_floor:
            why = _looser(row.operator_floor, micros, hard_cap, notice_s)
            if why:
                raise Forbidden(f"an operator set this budget; a member may make it stricter, not {why}", code="operator_budget")
        row.limit_micros, row.thresholds, row.hard_cap, row.notice_s = micros, sorted(set(thresholds)), hard_cap, notice_s
        row.set_by = editor.name
        if editor.operator:
            row.operator_floor = {"limit_micros": micros, "hard_cap": hard_cap, "notice_s": notice_s}
        s.add(row)
        s.flush()
        s.add(BudgetChange(tenant_id=tid, user_name=editor.name, role=editor.role, before=before, after=_budget_doc(row)))
        return row


def budget_changes(db: Database, tenant_id: int, page: keyset.Page | None = None) -> list[BudgetChange]:
    """A tenant's budget changes by id; ``page``: one page (``db.keyset``)."""
    with db.sessions() as s:
        q = select(BudgetChange).where(BudgetChange.tenant_id == tenant_id)
        return list(s.scalars(keyset.select_page(q, [BudgetChange.id], page)))


def get_budget(db: Database, tenant_id: int) -> BudgetRow | None:
    with db.sessions() as s:
        return s.get(BudgetRow, tenant_id)


# -- payment terms ---------------------------------------------------------------------------
def set_terms(
    db: Database,
    tenant: str | int,
    by: str,
    terms: str | None = None,
    credit_limit: str | None = None,
    grace_s: int | None = None,
    low_balance: str | None = None,
    clear_low_balance: bool = False,
    storage_debt_limit: str | None = None,
) -> TermsRow:
    """Change what is given (the rest stays); ``terms`` is ``prepaid``, ``credit`` or
    ``postpaid``. Who may change what is the caller's rule (operators: everything;
    members: their own low-balance alert)."""
    if terms is not None and terms not in TERMS:
        raise BillingError(f"terms must be one of {', '.join(TERMS)}, not {terms!r}")
    if grace_s is not None and not 0 <= grace_s <= 7 * 86_400:
        raise BillingError("grace_s must be between 0 and 604800 (a week)")
    try:
        credit = to_micros(credit_limit) if credit_limit is not None else None
        low = to_micros(low_balance) if low_balance is not None else None
        debt = to_micros(storage_debt_limit) if storage_debt_limit is not None else None
    except MoneyError as exc:
        raise BillingError(f"amount: {exc}") from None
    with db.transaction() as s:
        tid = tenant_id_of(s, tenant)
        row = s.get(TermsRow, tid, with_for_update=True) or TermsRow(
            tenant_id=tid,
            terms="prepaid",
            credit_limit_micros=0,
            grace_s=DEFAULT_GRACE_S,
            low_alerted=False,
            storage_debt_limit_micros=DEFAULT_STORAGE_DEBT_MICROS,
        )
        if terms is not None:
            row.terms = terms
        if credit is not None:
            row.credit_limit_micros = credit
        if grace_s is not None:
            row.grace_s = grace_s
        if debt is not None:
            row.storage_debt_limit_micros = debt
        if low is not None or clear_low_balance:
            row.low_balance_micros, row.low_alerted = low, False
        if row.terms == "credit" and not row.credit_limit_micros:
            raise BillingError("credit terms need a credit limit above zero (credit_limit)")
        row.set_by, row.updated_at = by, datetime.now(UTC)
        s.add(row)
        s.flush()
        return row


# -- subscriptions ---------------------------------------------------------------------------
def subscribe(
    db: Database, tenant: str | int, plan: str, model: str, gpu_count: int, months: int = 1, start_ms: int | None = None
) -> Subscription:
    """Buy a monthly or reserved term: the fee is charged now from the prepaid balance."""
    with db.transaction() as s:
        tid = tenant_id_of(s, tenant)
        vid, book = price_versions.current_book(s)
        try:
            q = plans.subscribe(book, plan, model, gpu_count, now_ms() if start_ms is None else start_ms, months)
        except (plans.PlanError, PriceBookError) as exc:
            raise BillingError(str(exc)) from None
        if balance(s, tid) < q.fee:
            raise Conflict(
                f"the {plan} fee is {fmt(q.fee, book.currency)}; the prepaid balance is "
                f"{fmt(balance(s, tid), book.currency)}: top up first",
                code="insufficient_balance",
            )
        row = Subscription(
            tenant_id=tid,
            plan=plan,
            gpu_model=q.gpu_model,
            gpu_count=gpu_count,
            start_ms=q.start_ms,
            end_ms=q.end_ms,
            fee=q.fee,
            price_version=vid,
        )
        s.add(row)
        s.flush()
        post_entry(s, ledger.subscription(f"sub:{row.id}", tid, q.fee, f"{plan} {gpu_count} x {q.gpu_model}"))
        return row


def cancel_subscription(db: Database, sub_id: int, tenant_id: int | None, at_ms: int | None = None) -> Subscription:
    """Cancel; a reserved term refunds the unused part pro rata (once)."""
    with db.transaction() as s:
        row = s.get(Subscription, sub_id)
        if row is None or (tenant_id is not None and row.tenant_id != tenant_id):
            raise NotFound(f"no subscription {sub_id}")
        if row.cancelled_ms is not None:
            return row
        at = now_ms() if at_ms is None else at_ms
        row.cancelled_ms = at
        row.refund = plans.refund(row.plan, row.fee, row.start_ms, row.end_ms, at)
        if row.refund:
            post_entry(
                s, ledger.refund(f"refund:{row.id}", row.tenant_id, row.refund, f"pro-rata refund of subscription {row.id}")
            )
        return row


def list_subscriptions(db: Database, tenant_id: int | None, page: keyset.Page | None = None) -> list[Subscription]:
    """Subscriptions by id; ``page``: one page (``db.keyset``)."""
    with db.sessions() as s:
        q = select(Subscription)
        q = q if tenant_id is None else q.where(Subscription.tenant_id == tenant_id)
        return list(s.scalars(keyset.select_page(q, [Subscription.id], page)))


def record_transfer(db: Database, tenant: str | int, gib: str, ts_ms: int | None = None, note: str = "") -> Transfer:
    try:
        milli = to_micros(gib) // 1000
    except MoneyError as exc:
        raise BillingError(f"gib: {exc}") from None
    with db.transaction() as s:
        row = Transfer(tenant_id=tenant_id_of(s, tenant), ts_ms=now_ms() if ts_ms is None else ts_ms, gib_milli=milli, note=note)
        s.add(row)
        s.flush()
        return row
