"""Factories for the billing suite: a migrated database with a tenant, a node and
allocation rows written the way the control plane writes them."""

from __future__ import annotations

from dataclasses import dataclass

from suanli.billing.store import ms_to_dt
from suanli.billing.tables import TermsRow
from suanli.db.models import Allocation, Instance, Job, Node, Tenant, User
from suanli.db.session import Database

HOUR = 3_600_000


@dataclass
class World:
    db: Database
    tenant_id: int
    user_id: int
    node_id: int
    instance_id: int


def world(url: str, tenant: str = "acme", disk_gib: int = 0, created_ms: int = 0, terms: str = "postpaid") -> World:
    """A tenant with a user, an H100 node and an instance. Post-paid by default: these
    suites are about rating and budgets, not the prepaid rule (tests/billing/test_prepaid.py)."""
    db = Database(url)
    db.migrate()
    with db.transaction() as s:
        t = Tenant(name=tenant)
        s.add(t)
        s.flush()
        s.add(TermsRow(tenant_id=t.id, terms=terms, credit_limit_micros=0, grace_s=300, low_alerted=False))
        u = User(tenant_id=t.id, name=f"{tenant}-user", role="member")
        n = Node(name=f"{tenant}-n0", gpu_model="H100", gpu_count=8, cpu_milli=64_000, memory_mib=512_000)
        s.add_all([u, n])
        s.flush()
        i = Instance(
            tenant_id=t.id,
            user_id=u.id,
            name="i",
            state="running",
            disk_gib=disk_gib,
            gpu_models=["H100"],
            gpu_count=1,
            created_at=ms_to_dt(created_ms),
            updated_at=ms_to_dt(created_ms),
        )
        s.add(i)
        s.flush()
        return World(db, t.id, u.id, n.id, i.id)


def add_tenant(w: World, name: str) -> int:
    with w.db.transaction() as s:
        t = Tenant(name=name)
        s.add(t)
        s.flush()
        s.add(TermsRow(tenant_id=t.id, terms="postpaid", credit_limit_micros=0, grace_s=300, low_alerted=False))
        s.flush()
        return t.id


def allocate(
    w: World,
    start_ms: int,
    end_ms: int | None,
    gpus: int = 1,
    milli: int = 1000,
    priority: str = "on-demand",
    model: str = "H100",
    tenant_id: int | None = None,
    job: bool = False,
    max_price: int | None = None,
) -> int:
    with w.db.transaction() as s:
        tid = tenant_id or w.tenant_id
        owner = {"instance_id": w.instance_id}
        if job:
            j = Job(tenant_id=tid, user_id=w.user_id, spec={}, state="running")
            s.add(j)
            s.flush()
            owner = {"job_id": j.id}
        a = Allocation(
            tenant_id=tid,
            node_id=w.node_id,
            gpu_model=model,
            gpu_indices=list(range(gpus)),
            milli_per_gpu=milli,
            cpu_milli=1,
            memory_mib=1,
            priority=priority,
            max_price_micros=max_price,
            started_at=ms_to_dt(start_ms),
            ended_at=ms_to_dt(end_ms) if end_ms is not None else None,
            **owner,
        )
        s.add(a)
        s.flush()
        return a.id
