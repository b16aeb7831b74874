"""Billing tables, declared on the control plane's Base (migrations 0002_billing, 0007).

Times the rater computes with are integer epoch milliseconds (``*_ms``); money is
integer micro-units (``BigInteger``). ``billing_usage`` has one row per (kind,
source, period), its primary key: what makes a rating run idempotent.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, BigInteger, Boolean, CheckConstraint, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from suanli.db.clock import utcnow
from suanli.db.models import Base, UTCDateTime


class PriceVersion(Base):
    __tablename__ = "billing_price_versions"
    id: Mapped[int] = mapped_column(primary_key=True)
    effective_ms: Mapped[int] = mapped_column(BigInteger)
    author: Mapped[str] = mapped_column(String(100), default="")
    note: Mapped[str] = mapped_column(Text, default="")
    book: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Usage(Base):
    __tablename__ = "billing_usage"
    # The idempotency key is the primary key: one index fewer to maintain per row.
    __table_args__ = (Index("ix_billing_usage_tenant", "tenant_id", "period_ms"),)
    kind: Mapped[str] = mapped_column(String(10), primary_key=True)  # gpu | storage | transfer
    source_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # allocation / instance / transfer id
    period_ms: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(Integer)
    workload_kind: Mapped[str] = mapped_column(String(10))  # instance | job
    workload_id: Mapped[int] = mapped_column(Integer)
    gpu_model: Mapped[str] = mapped_column(String(50))
    plan: Mapped[str] = mapped_column(String(20))
    start_ms: Mapped[int] = mapped_column(BigInteger)
    end_ms: Mapped[int] = mapped_column(BigInteger)
    quantity: Mapped[int] = mapped_column(BigInteger)  # GPU milli | GiB | milli-GiB
    billed_seconds: Mapped[int] = mapped_column(BigInteger)
    unit_price: Mapped[int] = mapped_column(BigInteger)
    amount: Mapped[int] = mapped_column(BigInteger)  # what was charged
    # storage beyond the tenant's debt limit: rated, not charged (``billing.debt``)
    waived: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    currency: Mapped[str] = mapped_column(String(3))
    price_version: Mapped[int] = mapped_column(Integer)
    run_id: Mapped[str] = mapped_column(String(40))


class LedgerEntry(Base):
    __tablename__ = "billing_entries"
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(160), unique=True)
    kind: Mapped[str] = mapped_column(String(20))
    tenant_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    memo: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Posting(Base):
    __tablename__ = "billing_postings"
    __table_args__ = (Index("ix_billing_postings_account", "account"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    entry_id: Mapped[int] = mapped_column(ForeignKey("billing_entries.id"))
    account: Mapped[str] = mapped_column(String(60))
    amount: Mapped[int] = mapped_column(BigInteger)


class Grant(Base):
    __tablename__ = "billing_grants"
    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    gpu_model: Mapped[str | None] = mapped_column(String(50), nullable=True)
    max_gpu_milli: Mapped[int] = mapped_column(Integer)
    gpu_minutes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    qos: Mapped[str] = mapped_column(String(20), default="on-demand")
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class BudgetRow(Base):
    __tablename__ = "billing_budgets"
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    limit_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    thresholds: Mapped[list] = mapped_column(JSON, default=list)
    hard_cap: Mapped[bool] = mapped_column(Boolean, default=False)
    notice_s: Mapped[int] = mapped_column(Integer, default=300)
    period: Mapped[str] = mapped_column(String(7), default="")
    alerted: Mapped[list] = mapped_column(JSON, default=list)
    notice_since_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # The budget an operator set (limit_micros, hard_cap, notice_s), kept as the floor a
    # member's own budget may tighten but never loosen (migration 0007); None: none set.
    operator_floor: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    set_by: Mapped[str] = mapped_column(String(100), default="")


class BudgetChange(Base):
    """Who changed a tenant's budget, when, from what to what (migration 0007)."""

    __tablename__ = "billing_budget_changes"
    __table_args__ = (Index("ix_billing_budget_changes_tenant", "tenant_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(Integer)
    user_name: Mapped[str] = mapped_column(String(100))
    role: Mapped[str] = mapped_column(String(20))
    before: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    after: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


TERMS = ("prepaid", "credit", "postpaid")
DEFAULT_GRACE_S = 300  # seconds of notice before running work of a tenant out of funds stops
#: How far (micro-units) a stopped disk's storage charge may take a prepaid or credit
#: tenant's balance below its floor; past it the charge is waived, the disk kept.
DEFAULT_STORAGE_DEBT_MICROS = 10_000_000


class TermsRow(Base):
    """A tenant's payment terms (migrations 0007, 0008). No row: prepaid with the defaults of
    ``billing.terms.Terms``, what every tenant an operator creates gets."""

    __tablename__ = "billing_terms"
    __table_args__ = (
        CheckConstraint("terms IN ('prepaid', 'credit', 'postpaid')", name="ck_billing_terms_terms"),
        CheckConstraint("credit_limit_micros >= 0", name="ck_billing_terms_credit"),
        CheckConstraint("storage_debt_limit_micros >= 0", name="ck_billing_terms_storage_debt"),
    )
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    terms: Mapped[str] = mapped_column(String(10), default="prepaid")  # prepaid | credit | postpaid
    credit_limit_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    grace_s: Mapped[int] = mapped_column(Integer, default=DEFAULT_GRACE_S)
    low_balance_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    low_alerted: Mapped[bool] = mapped_column(Boolean, default=False)
    storage_debt_limit_micros: Mapped[int] = mapped_column(
        BigInteger, default=DEFAULT_STORAGE_DEBT_MICROS, server_default=str(DEFAULT_STORAGE_DEBT_MICROS)
    )
    set_by: Mapped[str] = mapped_column(String(100), default="")
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Notice(Base):
    __tablename__ = "billing_notices"
    __table_args__ = (Index("ix_billing_notices_tenant", "tenant_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))  # alert | notice | stopped
    message: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Subscription(Base):
    __tablename__ = "billing_subscriptions"
    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    plan: Mapped[str] = mapped_column(String(20))
    gpu_model: Mapped[str] = mapped_column(String(50))
    gpu_count: Mapped[int] = mapped_column(Integer)
    start_ms: Mapped[int] = mapped_column(BigInteger)
    end_ms: Mapped[int] = mapped_column(BigInteger)
    fee: Mapped[int] = mapped_column(BigInteger)
    cancelled_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    refund: Mapped[int] = mapped_column(BigInteger, default=0)
    price_version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Transfer(Base):
    __tablename__ = "billing_transfers"
    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    ts_ms: Mapped[int] = mapped_column(BigInteger)
    gib_milli: Mapped[int] = mapped_column(BigInteger)
    note: Mapped[str] = mapped_column(Text, default="")


class RatingState(Base):
    """One row: the cutoff of the last completed rating run (the watermark)."""

    __tablename__ = "billing_state"
    id: Mapped[int] = mapped_column(primary_key=True)
    watermark_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    last_run: Mapped[str] = mapped_column(String(40), default="")
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
