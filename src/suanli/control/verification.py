"""Verification results per node (``suanli verify``), their history, and the cordon they cause.

A node's ``suanli verify --json`` report is judged again here, with the platform's
thresholds and the model the node is registered (and sold) as, not with whatever the
node was told: a node cannot pass itself. A failing node is cordoned with the reasons
(one node event, its message the reasons); an operator re-runs the check and, when it
passes, makes the node ready again (``uncordon=True``, or ``suanli nodes uncordon``).

A report measured on the CPU path (no GPU visible to the check) is kept as
``unmeasured``: it says nothing about the GPUs, so it neither passes nor cordons.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from suanli.control.auth import Principal
from suanli.db.models import Event, Node, NodeVerification
from suanli.db.session import Database
from suanli.errors import Invalid, NotFound
from suanli.verify.datasheet import catalog_model, datasheet
from suanli.verify.judge import ReportError, ThresholdError, Thresholds, judge, measured_from_entry, node_reason

#: Server-side thresholds, from the environment (``suanli server`` reads them at start).
ENV_MEMORY = "SUANLI_VERIFY_MIN_MEMORY_RATIO"
ENV_TFLOPS = "SUANLI_VERIFY_MIN_TFLOPS_RATIO"
ENV_VGPU = "SUANLI_VERIFY_ALLOW_VGPU"


def thresholds_from_env(env: dict[str, str] | None = None) -> Thresholds:
    """The platform's thresholds: defaults (90 % memory, 50 % TFLOPS, no vGPU) unless the
    environment says otherwise; a bad value is an error, never ignored."""
    env = dict(os.environ) if env is None else env
    try:
        return Thresholds(
            min_memory_ratio=float(env.get(ENV_MEMORY, "0.90")),
            min_tflops_ratio=float(env.get(ENV_TFLOPS, "0.50")),
            allow_vgpu=env.get(ENV_VGPU, "0").lower() in ("1", "true", "yes"),
        )
    except (ValueError, ThresholdError) as exc:
        raise Invalid(f"verify thresholds ({ENV_MEMORY}, {ENV_TFLOPS}): {exc}") from None


@dataclass(frozen=True)
class Judged:
    status: str
    reasons: list[str]
    gpus: list[dict]  # per GPU: index, ok, reasons, notes and the ratios, as judged here
    tflops_ratio: float | None
    memory_ratio: float | None
    bandwidth_ratio: float | None


def _lowest(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def judge_report(report: object, model: str, gpu_count: int, limits: Thresholds) -> Judged:
    """The verdict on a node registered as ``gpu_count`` x ``model`` from its report."""
    if not isinstance(report, dict):
        raise Invalid("report: expected the JSON object `suanli verify --json` prints")
    device = report.get("device")
    if device not in ("cuda", "cpu"):
        raise Invalid(f"report.device: expected 'cuda' or 'cpu', got {device!r}")
    entries = report.get("gpus")
    if not isinstance(entries, list):
        raise Invalid("report.gpus: expected a list")
    if device == "cpu":
        return Judged("unmeasured", ["no GPU visible to the check: measured the CPU path only"], [], None, None, None)
    if not entries:
        raise Invalid("report.gpus: a cuda report lists its GPUs")
    sheet = datasheet(model)
    failures: dict[int, list[str]] = {}
    judged = []
    for i, entry in enumerate(entries):
        try:
            name = entry.get("name") if isinstance(entry, dict) else None
            m = measured_from_entry(entry, f"report.gpus[{i}]", catalog_model(name) if isinstance(name, str) else None)
        except ReportError as exc:
            raise Invalid(str(exc)) from None
        v = judge(model, sheet, m, limits)
        index = entry.get("index") if isinstance(entry.get("index"), int) else i
        failures[index] = v.reasons
        judged.append({"index": index, "ok": v.ok, "reasons": v.reasons, "notes": v.notes, **_ratios(v)})
    reasons = [node_reason(failures)] if any(failures.values()) else []
    if len(entries) < gpu_count:
        reasons.append(f"the check saw {len(entries)} GPUs, the node is registered with {gpu_count}")
    return Judged(
        "failed" if reasons else "passed",
        reasons,
        judged,
        _lowest([g["tflops_ratio"] for g in judged]),
        _lowest([g["memory_ratio"] for g in judged]),
        _lowest([g["bandwidth_ratio"] for g in judged]),
    )


def _ratios(v: object) -> dict:
    return {k: getattr(v, k) for k in ("tflops_ratio", "memory_ratio", "bandwidth_ratio")}


def node_named(s: Session, name: str) -> Node:
    node = s.scalar(select(Node).where(Node.name == name))
    if node is None:
        raise NotFound(f"no node {name!r}")
    return node


def record(
    db: Database, who: Principal, name: str, report: object, limits: Thresholds | None = None, uncordon: bool = False
) -> tuple[NodeVerification, str]:
    """Keep node ``name``'s report, judged here; cordon a node that fails, and with
    ``uncordon`` make a cordoned node that passes ready again. Returns the row and the
    node's state after."""
    who.require("admin", "operator")
    limits = limits or thresholds_from_env()
    with db.transaction() as s:
        return record_in(s, who.name, node_named(s, name), report, limits, uncordon)


def record_in(
    s: Session, actor: str, node: Node, report: object, limits: Thresholds, uncordon: bool = False, job_id: int | None = None
) -> tuple[NodeVerification, str]:
    """``record`` in the caller's transaction (a verification job's outcome is recorded
    with its run's state, ``control.verify_jobs``); ``Invalid`` for a bad report, and
    then nothing is written."""
    j = judge_report(report, node.gpu_model, node.gpu_count, limits)
    assert isinstance(report, dict)
    row = NodeVerification(
        node_id=node.id,
        measured_at=str(report.get("measured_at") or "")[:40],
        actor=actor,
        status=j.status,
        device=str(report["device"]),
        gpu_count=len(report["gpus"]),
        tflops_ratio=j.tflops_ratio,
        memory_ratio=j.memory_ratio,
        bandwidth_ratio=j.bandwidth_ratio,
        reasons=j.reasons,
        report={
            **report,
            "judged": {"thresholds": limits.as_dict(), "model": node.gpu_model, "gpus": j.gpus},
            **({"job_id": job_id} if job_id is not None else {}),
        },
    )
    s.add(row)
    if j.status == "failed" and node.state == "ready":
        message = "; ".join(j.reasons)[:1000]
        s.add(Event(kind="node", object_id=node.id, from_state="ready", to_state="cordoned", message=message))
        node.state = "cordoned"
    elif j.status == "passed" and uncordon and node.state == "cordoned":
        s.add(
            Event(kind="node", object_id=node.id, from_state="cordoned", to_state="ready", message=f"verify passed, by {actor}")
        )
        node.state = "ready"
    s.flush()
    return row, node.state


def history(db: Database, name: str, limit: int = 50) -> list[NodeVerification]:
    """Node ``name``'s results, newest first."""
    with db.sessions() as s:
        node = node_named(s, name)
        return list(
            s.scalars(
                select(NodeVerification)
                .where(NodeVerification.node_id == node.id)
                .order_by(NodeVerification.id.desc())
                .limit(max(1, min(limit, 500)))
            )
        )


def by_id(db: Database, verification_id: int) -> tuple[NodeVerification, str]:
    """Result ``verification_id`` and its node's state now."""
    with db.sessions() as s:
        row = s.get(NodeVerification, verification_id)
        if row is None:
            raise NotFound(f"no verification {verification_id}")
        node = s.get(Node, row.node_id)
        return row, node.state if node is not None else ""


#: each node's newest result's id
_NEWEST = select(func.max(NodeVerification.id)).group_by(NodeVerification.node_id)


def latest(s: Session) -> dict[int, NodeVerification]:
    """Each node's newest result, by node id (nodes never verified are absent)."""
    return {v.node_id: v for v in s.scalars(select(NodeVerification).where(NodeVerification.id.in_(_NEWEST)))}


def mark(v: NodeVerification | None) -> dict | None:
    """The 'verified' mark a listing shows: status, date, the lowest ratios, why it failed."""
    if v is None:
        return None
    return {
        "status": v.status,
        "at": v.created_at.isoformat(timespec="seconds"),
        "tflops_ratio": v.tflops_ratio,
        "memory_ratio": v.memory_ratio,
        "bandwidth_ratio": v.bandwidth_ratio,
        "reasons": list(v.reasons),
    }


def marks(db: Database) -> dict[int, dict]:
    """Each verified node's mark, by node id."""
    with db.sessions() as s:
        return {node_id: m for node_id, v in latest(s).items() if (m := mark(v)) is not None}


def marks_by_model(db: Database) -> dict[str, dict]:
    """Per registered GPU model: how many of its nodes passed / failed their latest check,
    the lowest ratios among those that passed, and the newest check's date."""
    newest = select(Node.gpu_model, NodeVerification).join(Node, Node.id == NodeVerification.node_id)
    with db.sessions() as s:
        out: dict[str, dict] = {}
        for model, v in s.execute(newest.where(NodeVerification.id.in_(_NEWEST))):
            e = out.setdefault(
                model,
                {"passed": 0, "failed": 0, "unmeasured": 0, "tflops_ratio": None, "memory_ratio": None, "at": None},
            )
            e[v.status] += 1
            if v.status == "passed":
                e["tflops_ratio"] = _lowest([e["tflops_ratio"], v.tflops_ratio])
                e["memory_ratio"] = _lowest([e["memory_ratio"], v.memory_ratio])
            at = v.created_at.isoformat(timespec="seconds")
            e["at"] = max(e["at"] or at, at)
        return out
