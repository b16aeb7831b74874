"""Database models: the persistent truth of the control plane.

These are storage shapes only. API schemas live in ``suanli.api.schemas`` and
scheduler values in ``suanli.scheduler``; converters join them explicitly.

Capacity is guarded by the database itself, not by the code that writes it:
``nodes.cpu_used``/``mem_used`` and ``gpus.used_milli`` are counters changed
only by atomic ``UPDATE ... SET x = x + :n`` inside the allocation transaction,
and CHECK constraints keep them within the node's capacity. Two schedulers that
plan on stale views can both try; the second one's UPDATE violates a constraint
and its whole transaction rolls back, so a GPU is never double-allocated, on
SQLite and on PostgreSQL alike.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from suanli.db.clock import utcnow


class UTCDateTime(TypeDecorator):
    """A timezone-aware UTC datetime on every backend (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    pass


class Tenant(Base):
    __tablename__ = "tenants"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: people of this tenant must sign in to the console with a TOTP code too
    require_2fa: Mapped[bool] = mapped_column(Boolean, default=False)
    #: idle auto-stop window of this tenant's new instances, seconds (None: the platform's default)
    autostop_s: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)


class User(Base):
    __tablename__ = "users"
    __table_args__ = (
        CheckConstraint("role IN ('admin', 'operator', 'member')", name="ck_users_role"),
        Index("ix_users_tenant", "tenant_id", "id"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    name: Mapped[str] = mapped_column(String(100), unique=True)
    role: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: a disabled user's tokens and sign-ins are refused; their work is left as it is
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    #: argon2 hash of the console password; None: no password sign-in
    password_hash: Mapped[str | None] = mapped_column(Text, nullable=True, default=None)
    #: the TOTP (RFC 6238) secret, sealed (``control.secrets``); enabled once confirmed by a code
    totp_secret: Mapped[str | None] = mapped_column(Text, nullable=True, default=None)
    totp_enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    #: the time step of the last code accepted: a code is good once (RFC 6238 section 5.2)
    totp_last_step: Mapped[int | None] = mapped_column(BigInteger, nullable=True, default=None)


class ApiToken(Base):
    """Only the SHA-256 of a token is kept; the token itself is shown once.

    ``scopes`` narrow what the token may do (``control.auth.Scopes``): ``read`` (GET
    only), ``route:/v1/jobs`` (only paths under it); empty: everything its user may do.
    ``tenant_id`` pins an operator's token to one tenant's objects."""

    __tablename__ = "api_tokens"
    __table_args__ = (Index("ix_api_tokens_user", "user_id", "id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(12))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    name: Mapped[str] = mapped_column(String(100), default="")
    #: ``api`` (made by hand, for scripts and the CLI) or ``session`` (a console sign-in)
    kind: Mapped[str] = mapped_column(String(20), default="api")
    scopes: Mapped[list] = mapped_column(JSON, default=list)
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id"), nullable=True, default=None)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True, default=None)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True, default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True, default=None)


class Node(Base):
    __tablename__ = "nodes"
    __table_args__ = (
        CheckConstraint("cpu_used >= 0 AND cpu_used <= cpu_milli", name="ck_nodes_cpu"),
        CheckConstraint("mem_used >= 0 AND mem_used <= memory_mib", name="ck_nodes_mem"),
        CheckConstraint("state IN ('ready', 'cordoned', 'down')", name="ck_nodes_state"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    zone: Mapped[str] = mapped_column(String(100), default="")
    backend: Mapped[str] = mapped_column(String(30), default="local")
    state: Mapped[str] = mapped_column(String(20), default="ready")
    gpu_model: Mapped[str] = mapped_column(String(50))
    gpu_count: Mapped[int] = mapped_column(Integer)
    gpu_memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    cpu_milli: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(Integer)
    cpu_used: Mapped[int] = mapped_column(Integer, default=0)
    mem_used: Mapped[int] = mapped_column(Integer, default=0)
    nvlink_islands: Mapped[list] = mapped_column(JSON, default=list)
    ib_leaf: Mapped[str] = mapped_column(String(100), default="")
    labels: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: last heartbeat of the node's agent; None: no agent, liveness not watched (control.heartbeat)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True, default=None)


class NodeVerification(Base):
    """One ``suanli verify`` result for a node, kept with its history (``control.verification``)."""

    __tablename__ = "node_verifications"
    __table_args__ = (
        CheckConstraint("status IN ('passed', 'failed', 'unmeasured')", name="ck_node_verifications_status"),
        Index("ix_node_verifications_node", "node_id", "id"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    measured_at: Mapped[str] = mapped_column(String(40), default="")  # the report's own time, as it says it
    actor: Mapped[str] = mapped_column(String(100), default="")
    status: Mapped[str] = mapped_column(String(20))  # passed | failed | unmeasured (no GPU seen)
    device: Mapped[str] = mapped_column(String(10))  # cuda | cpu
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    tflops_ratio: Mapped[float | None] = mapped_column(Float, nullable=True)  # the lowest of the node's GPUs
    memory_ratio: Mapped[float | None] = mapped_column(Float, nullable=True)
    bandwidth_ratio: Mapped[float | None] = mapped_column(Float, nullable=True)
    reasons: Mapped[list] = mapped_column(JSON, default=list)
    report: Mapped[dict] = mapped_column(JSON, default=dict)


class NodeVerifyRun(Base):
    """One ``suanli nodes verify NAME``: a job pinned to the node runs ``suanli verify
    --json`` in its own container; when it ends the report it left is recorded
    (``control.verify_jobs``). ``state``: waiting (the job has not ended), recorded
    (``verification_id`` is the result), failed (``error`` says why; nothing recorded)."""

    __tablename__ = "node_verify_runs"
    __table_args__ = (
        CheckConstraint("state IN ('waiting', 'recorded', 'failed')", name="ck_node_verify_runs_state"),
        Index("ix_node_verify_runs_state", "state"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"))
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    actor: Mapped[str] = mapped_column(String(100), default="")
    uncordon: Mapped[bool] = mapped_column(Boolean, default=False)
    state: Mapped[str] = mapped_column(String(20), default="waiting")
    error: Mapped[str] = mapped_column(Text, default="")
    verification_id: Mapped[int | None] = mapped_column(ForeignKey("node_verifications.id"), nullable=True, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True, default=None)


class Gpu(Base):
    __tablename__ = "gpus"
    __table_args__ = (
        UniqueConstraint("node_id", "index", name="uq_gpus_node_index"),
        CheckConstraint("used_milli >= 0 AND used_milli <= 1000", name="ck_gpus_milli"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"))
    index: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(50))
    uuid: Mapped[str] = mapped_column(String(100), default="")
    memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    virtual: Mapped[bool] = mapped_column(Boolean, default=True)
    used_milli: Mapped[int] = mapped_column(Integer, default=0)


class SpotNotice:
    """A spot reclaim notice given to running work (``control.notice``): in columns of
    its own, so a restarted server keeps the deadlines it promised. Times are seconds
    since the epoch, as the control plane's clock gives them. All NULL: no notice."""

    notice_deadline: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    notice_at: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    notice_s: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    #: the beneficiary (``job-7``), or ``price`` for an outbid bid
    notice_for: Mapped[str | None] = mapped_column(String(100), nullable=True, default=None)
    #: replaces "spot reclaim for <beneficiary>" in the events (an outbid's reason)
    notice_why: Mapped[str | None] = mapped_column(Text, nullable=True, default=None)
    #: the work ended during its notice (its deadline was moved to then)
    notice_ended_early: Mapped[bool] = mapped_column(Boolean, default=False)


class Instance(SpotNotice, Base):
    __tablename__ = "instances"
    __table_args__ = (Index("ix_instances_tenant", "tenant_id", "id"),)  # a renter's listing, by id
    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    name: Mapped[str] = mapped_column(String(100), default="")
    state: Mapped[str] = mapped_column(String(20), default="pending")
    gpu_models: Mapped[list] = mapped_column(JSON, default=list)
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    gpu_milli: Mapped[int] = mapped_column(Integer, default=0)
    cpu_milli: Mapped[int] = mapped_column(Integer, default=0)
    memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    image: Mapped[str] = mapped_column(String(200), default="")
    disk_gib: Mapped[int] = mapped_column(Integer, default=10)
    priority: Mapped[str] = mapped_column(String(20), default="on-demand")
    #: Spot bid in micro-units per GPU-hour (``max_price``); NULL: none.
    max_price_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: What the owner asked for; the control loop moves ``state`` towards it.
    desired: Mapped[str] = mapped_column(String(20), default="running")
    handles: Mapped[list | None] = mapped_column(JSON, nullable=True)
    #: Set by the scheduler when it allocates, cleared once the launch outcome is
    #: recorded: a row with an owner and no handles is a launch in flight.
    launch_owner: Mapped[str | None] = mapped_column(String(40), nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    #: container ports published through the server's proxy (``--port``)
    ports: Mapped[list] = mapped_column(JSON, default=list)
    #: what ran it last: ``container`` or ``process`` (no isolation); "" before its first launch
    runtime: Mapped[str] = mapped_column(String(20), default="")
    #: name -> sealed value (``control.secrets``): decrypted only into the workload's environment
    secrets: Mapped[dict] = mapped_column(JSON, default=dict)
    #: idle auto-stop window, seconds (``control.autostop``); None: never stopped for idleness
    autostop_s: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    #: the last time (epoch seconds) a sample saw it active; None: not sampled since it started
    active_at: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Job(SpotNotice, Base):
    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_state", "state"), Index("ix_jobs_tenant", "tenant_id", "id"))
    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    name: Mapped[str] = mapped_column(String(100), default="")
    state: Mapped[str] = mapped_column(String(20), default="queued")
    spec: Mapped[dict] = mapped_column(JSON)
    gpu_models: Mapped[list] = mapped_column(JSON, default=list)
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    gpu_milli: Mapped[int] = mapped_column(Integer, default=0)
    cpu_milli: Mapped[int] = mapped_column(Integer, default=0)
    memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    num_nodes: Mapped[int] = mapped_column(Integer, default=1)
    priority: Mapped[str] = mapped_column(String(20), default="on-demand")
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    #: Spot bid in micro-units per GPU-hour (``resources.max_price``); NULL: none.
    max_price_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    handles: Mapped[list | None] = mapped_column(JSON, nullable=True)
    #: Set by the scheduler when it allocates, cleared once the launch outcome is
    #: recorded: a row with an owner and no handles is a launch in flight.
    launch_owner: Mapped[str | None] = mapped_column(String(40), nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    #: what ran it last: ``container`` or ``process`` (no isolation); "" before its first launch
    runtime: Mapped[str] = mapped_column(String(20), default="")
    #: name -> sealed value (``control.secrets``): decrypted only into the workload's environment
    secrets: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: the pipeline or sweep it was submitted in (``control.pipelines``); "" for none
    group_name: Mapped[str] = mapped_column(String(120), default="")
    #: node names it must run on (``Request.pin_nodes``); empty: any. Set only by the
    #: control plane for an operator's node verification (``control.verify_jobs``)
    pin_nodes: Mapped[list] = mapped_column(JSON, default=list)
    #: it may land on a cordoned pinned node (re-verifying a node cordoned for failing)
    ignore_cordon: Mapped[bool] = mapped_column(Boolean, default=False)
    #: the waiting work (``job-7``) it was evicted for, by a spot reclaim or a migration:
    #: a scheduling pass places it after that work (``scheduling.waiting_work``), so it
    #: does not take back the room it left. Cleared when it is placed again.
    evicted_for: Mapped[str | None] = mapped_column(String(100), nullable=True, default=None)
    #: ``[node, GPU index]``: where a migration's plan put this share (``control.migrate``);
    #: its next placement goes there if that GPU still takes it
    moved_to: Mapped[list | None] = mapped_column(JSON, nullable=True, default=None)


class JobDependency(Base):
    """An edge of a pipeline: ``job_id`` waits for ``depends_on_id``. ``after``:
    ``succeeded`` (runs only if it succeeded; cancelled if it failed or was cancelled)
    or ``finished`` (runs after any end)."""

    __tablename__ = "job_dependencies"
    __table_args__ = (
        CheckConstraint("after IN ('succeeded', 'finished')", name="ck_job_deps_after"),
        CheckConstraint("job_id <> depends_on_id", name="ck_job_deps_self"),
        Index("ix_job_deps_parent", "depends_on_id"),
    )
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    depends_on_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    after: Mapped[str] = mapped_column(String(20), default="succeeded")


class Image(Base):
    """A container image the platform offers; operators add them, renters pick by ``name``."""

    __tablename__ = "images"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    #: the engine's reference, e.g. ``localhost/suanli/python:3.11``
    ref: Mapped[str] = mapped_column(String(300))
    description: Mapped[str] = mapped_column(Text, default="")
    is_default: Mapped[bool] = mapped_column(Boolean, default=False)
    #: what is inside: ``{"python": "3.11", "cuda": null, "jupyterlab": false, "sshd": true}``
    contents: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class SshKey(Base):
    """A user's public SSH key: it opens that user's instances, nobody else's."""

    __tablename__ = "ssh_keys"
    __table_args__ = (UniqueConstraint("user_id", "fingerprint", name="uq_ssh_keys_user_fingerprint"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    name: Mapped[str] = mapped_column(String(100), default="")
    public_key: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Allocation(Base):
    """Concrete slots held by one node's share of a workload, from ``started_at``
    until ``ended_at`` (NULL while held). Billing reads these intervals."""

    __tablename__ = "allocations"
    __table_args__ = (
        CheckConstraint("(job_id IS NULL) <> (instance_id IS NULL)", name="ck_alloc_owner"),
        Index("ix_alloc_active", "ended_at"),
        Index("ix_alloc_instance", "instance_id"),  # a listing's allocations, by workload
        Index("ix_alloc_job", "job_id"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id"), nullable=True)
    instance_id: Mapped[int | None] = mapped_column(ForeignKey("instances.id"), nullable=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"))
    node_rank: Mapped[int] = mapped_column(Integer, default=0)
    gpu_model: Mapped[str] = mapped_column(String(50))
    gpu_indices: Mapped[list] = mapped_column(JSON)
    milli_per_gpu: Mapped[int] = mapped_column(Integer)
    cpu_milli: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(Integer)
    priority: Mapped[str] = mapped_column(String(20))
    #: The workload's spot bid when this slot was taken (micro-units per GPU-hour; NULL:
    #: none): the rater caps this interval's spot price at it.
    max_price_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class Event(Base):
    """Append-only log of every state transition (and allocation bind/release)."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_object", "kind", "object_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    ts: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    kind: Mapped[str] = mapped_column(String(20))
    object_id: Mapped[int] = mapped_column(Integer)
    from_state: Mapped[str | None] = mapped_column(String(20), nullable=True)
    to_state: Mapped[str] = mapped_column(String(20))
    message: Mapped[str] = mapped_column(Text, default="")

    def __repr__(self) -> str:  # one line of text, so a failed test shows what happened
        ts = f"{self.ts:%H:%M:%S.%f}" if self.ts else "-"
        return f"<Event {ts} {self.kind} {self.object_id} {self.from_state}->{self.to_state} {self.message!r}>"


class AuditRecord(Base):
    """Who did what to which object, from where, and how it ended (``control.audit``).

    Append-only: nothing in Suanli updates a record, and only retention deletes the
    oldest. ``hash`` is SHA-256 over ``prev_hash`` and the record's fields, so an edited
    or deleted record breaks the chain at that point (``suanli audit verify``)."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_at", "at"), Index("ix_audit_log_tenant", "tenant_id", "id"))
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    actor_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    actor: Mapped[str] = mapped_column(String(100))
    actor_role: Mapped[str] = mapped_column(String(20))
    #: the tenant whose object it is (None: platform-wide, or unknown)
    tenant_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    action: Mapped[str] = mapped_column(String(100))
    object: Mapped[str] = mapped_column(String(200))
    source: Mapped[str] = mapped_column(String(100))
    result: Mapped[str] = mapped_column(String(40))
    detail: Mapped[dict] = mapped_column(JSON, default=dict)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


class AuditHead(Base):
    """The chain's tip (one row, id 1): every append updates it first, which takes its
    lock, so concurrent appends are serialised and never fork the chain."""

    __tablename__ = "audit_head"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    last_id: Mapped[int] = mapped_column(BigInteger)
    last_hash: Mapped[str] = mapped_column(String(64))


class WorkloadMetric(Base):
    """A workload's resource use over time (``control.metrics``): raw samples
    (``resolution_s`` 0, one per collection) and their downsampled buckets
    (``resolution_s`` 300: averages over five minutes, ``ts`` the bucket's start).
    GPU columns are NULL when not measured (virtual GPUs: ``gpu_note`` says so)."""

    __tablename__ = "workload_metrics"
    __table_args__ = (
        Index("ix_workload_metrics_object", "kind", "workload_id", "ts"),
        Index("ix_workload_metrics_resolution", "resolution_s", "ts"),
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20))
    workload_id: Mapped[int] = mapped_column(Integer)
    tenant_id: Mapped[int] = mapped_column(Integer)
    ts: Mapped[float] = mapped_column(Float)  #: epoch seconds
    resolution_s: Mapped[int] = mapped_column(Integer, default=0)
    samples: Mapped[int] = mapped_column(Integer, default=1)
    cpu_percent: Mapped[float] = mapped_column(Float)
    memory_mib: Mapped[float] = mapped_column(Float)
    gpu_util_percent: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpu_memory_mib: Mapped[float | None] = mapped_column(Float, nullable=True)
    power_w: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: open SSH/port connections at the sample (None: not measurable)
    sessions: Mapped[int | None] = mapped_column(Integer, nullable=True)
    gpu_note: Mapped[str] = mapped_column(String(100), default="")
    #: raw samples only: each GPU's reading (index, uuid, model, node, util, memory, power)
    gpus: Mapped[list] = mapped_column(JSON, default=list)


class TenantWebhook(Base):
    """Where a tenant's alerts are POSTed (``control.alerts``); ``secret`` is sealed
    (``control.secrets``) and signs every delivery (``X-Suanli-Signature``)."""

    __tablename__ = "tenant_webhooks"
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    url: Mapped[str] = mapped_column(Text)
    secret: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Alert(Base):
    """Something a tenant (or the operator: ``tenant_id`` of the platform's own tenant)
    should know now: idle, low balance, budget, job failed, node down. Made from events
    and billing notices (``control.alerts``), then delivered to the tenant's webhook.
    ``delivery``: ``pending``, ``delivered``, ``failed`` (retries spent), ``none`` (no webhook)."""

    __tablename__ = "alerts"
    __table_args__ = (Index("ix_alerts_tenant", "tenant_id", "id"), Index("ix_alerts_delivery", "delivery"))
    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(30))  #: idle | autostop | low_balance | budget | job_failed | node_down
    object: Mapped[str] = mapped_column(String(100), default="")  #: ``instance-3``, ``job-7``, ``node-2``
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    delivery: Mapped[str] = mapped_column(String(20), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    last_error: Mapped[str] = mapped_column(Text, default="")
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True, default=None)


class AlertCursor(Base):
    """How far the alert scan has read (one row, id 1): the last event and billing notice."""

    __tablename__ = "alert_cursor"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    last_event_id: Mapped[int] = mapped_column(BigInteger, default=0)
    last_notice_id: Mapped[int] = mapped_column(BigInteger, default=0)


class LoopStatus(Base):
    """The control loop's counters (one row, id 1), written by the loop's process so API
    processes can show them (``/healthz``, ``/metrics``): ``control.loop_report``."""

    __tablename__ = "loop_status"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner: Mapped[str] = mapped_column(String(40), default="")  #: the loop's claim owner (a fresh one per start)
    ticks: Mapped[int] = mapped_column(BigInteger, default=0)
    launched: Mapped[int] = mapped_column(BigInteger, default=0)
    conflicts: Mapped[int] = mapped_column(BigInteger, default=0)
    policy_errors: Mapped[int] = mapped_column(BigInteger, default=0)
    last_tick_s: Mapped[float] = mapped_column(Float, default=0.0)
    waiting: Mapped[int] = mapped_column(Integer, default=0)  #: rows the last pass could not place
    #: the reclaim phases' counters (``control.plane.PhaseStats``)
    notices: Mapped[int] = mapped_column(BigInteger, default=0)
    reclaimed: Mapped[int] = mapped_column(BigInteger, default=0)
    migrations: Mapped[int] = mapped_column(BigInteger, default=0)
    failed_over: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class WaitingReason(Base):
    """Why a waiting instance or job waits, as the last scheduling pass (or admission)
    said (``control.waiting``), and since when for that code: written by the loop's
    process, read by the API's (``control.loop_report``)."""

    __tablename__ = "waiting_reasons"
    kind: Mapped[str] = mapped_column(String(10), primary_key=True)  #: instance | job
    workload_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    code: Mapped[str] = mapped_column(String(30))
    detail: Mapped[str] = mapped_column(Text, default="")
    since: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class PageChange(Base):
    """Per tenant, how many commits changed what its listing pages show, counted by
    migration 0016's triggers on SQLite and read by ``db.changes`` (PostgreSQL notifies
    instead and leaves this empty); tenant 0: what every tenant's pages show."""

    __tablename__ = "page_changes"
    tenant_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(BigInteger, server_default="0")


class AuthFailure(Base):
    """One failed attempt (a bad token, a failed sign-in) by key, for the throttles that
    every API process shares (``control.throttle.DbThrottle``); ``at``: Unix seconds."""

    __tablename__ = "auth_failures"
    __table_args__ = (Index("ix_auth_failures_key", "scope", "key", "at"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    scope: Mapped[str] = mapped_column(String(20))  #: bad_tokens | sign_ins
    key: Mapped[str] = mapped_column(String(300))
    at: Mapped[float] = mapped_column(Float)
