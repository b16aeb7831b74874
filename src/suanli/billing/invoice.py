"""Monthly invoices: a JSON document and a printable HTML page. Pure.

The document is built from rows the store reads (usage records, subscription fees
and refunds, top-ups); lines group usage by kind, GPU model and plan. Amounts stay
integer micro-units in ``*_micros`` fields, and the total is their sum. Display strings
are exact to the micro-unit (``money.fmt_exact``: ``¥0.64``, ``¥0.636421``), so the
lines as printed add up to the total as printed; rounding each to the fen would not
(¥0.636 + ¥0.005 shows as ¥0.64 + ¥0.01 with a total of ¥0.64).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from importlib import resources
from string import Template

from suanli.billing.money import as_text, fmt_exact


@dataclass(frozen=True)
class Line:
    kind: str
    gpu_model: str | None
    plan: str
    quantity: str
    billed_seconds: int
    amount: int


def usage_lines(rows: list[tuple[str, str, str, int, int, int]]) -> list[Line]:
    """(kind, gpu_model, plan, quantity, billed_seconds, amount) rows -> grouped lines."""
    groups: dict[tuple[str, str, str], list[int]] = {}
    for kind, model, plan, qty, secs, amount in rows:
        g = groups.setdefault((kind, model, plan), [0, 0, 0])
        if kind == "gpu":
            g[0] += qty * secs  # milli-GPU-seconds
        elif kind == "storage":
            g[0] += qty * secs  # GiB-seconds
        else:
            g[0] += qty  # milli-GiB
        g[1] += secs
        g[2] += amount
    out = []
    for (kind, model, plan), (q, secs, amount) in sorted(groups.items()):
        shown = {"gpu": f"{q / 1000 / 3600:.4f} GPU-h", "storage": f"{q / 3600 / 720:.4f} GiB-month"}.get(
            kind, f"{q / 1000:.3f} GiB"
        )
        out.append(Line(kind, None if model == "-" else model, plan if kind == "gpu" else "-", shown, secs, amount))
    return out


def build(
    tenant: dict,
    month: str,
    currency: str,
    lines: list[Line],
    subscriptions: list[dict],
    payments: list[dict],
    balance: int,
    waived: int = 0,
) -> dict:
    """``waived``: storage rated past the tenant's debt limit and not charged (``billing.debt``)."""
    usage_total = sum(ln.amount for ln in lines)
    subs_total = sum(s["fee"] - s["refund"] for s in subscriptions)
    total = usage_total + subs_total
    return {
        "tenant": tenant,
        "month": month,
        "currency": currency,
        "lines": [
            {
                "kind": ln.kind,
                "gpu_model": ln.gpu_model,
                "plan": ln.plan,
                "quantity": ln.quantity,
                "billed_seconds": ln.billed_seconds,
                "amount": float(as_text(ln.amount)),
                "amount_micros": ln.amount,
                "amount_text": fmt_exact(ln.amount, currency),
            }
            for ln in lines
        ],
        "subscriptions": [
            {**s, "fee_text": fmt_exact(s["fee"], currency), "refund_text": fmt_exact(s["refund"], currency)}
            for s in subscriptions
        ],
        "payments": [{**p, "amount_text": fmt_exact(p["amount"], currency)} for p in payments],
        "usage_total_micros": usage_total,
        "subscriptions_total_micros": subs_total,
        "total_micros": total,
        "total": float(as_text(total)),
        "total_text": fmt_exact(total, currency),
        "balance_micros": balance,
        "balance_text": fmt_exact(balance, currency),
        "storage_waived_micros": waived,
        "storage_waived_text": fmt_exact(waived, currency),
    }


def _rows(cells: list[list[str]]) -> str:
    return "\n".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in cells)


def render_html(doc: dict) -> str:
    tpl = Template(resources.files("suanli.billing").joinpath("templates/invoice.html").read_text("utf-8"))
    lines = (
        _rows(
            [
                [ln["kind"], ln["gpu_model"] or "", ln["plan"], ln["quantity"], ln["billed_seconds"], ln["amount_text"]]
                for ln in doc["lines"]
            ]
        )
        or '<tr><td colspan="6">no usage</td></tr>'
    )
    subs = (
        _rows(
            [
                [s["id"], s["plan"], f"{s['gpu_count']} x {s['gpu_model']}", s["fee_text"], s["refund_text"]]
                for s in doc["subscriptions"]
            ]
        )
        or '<tr><td colspan="5">none</td></tr>'
    )
    pays = _rows([[p["date"], p["memo"], p["amount_text"]] for p in doc["payments"]]) or '<tr><td colspan="3">none</td></tr>'
    return tpl.substitute(
        tenant=html.escape(doc["tenant"]["name"]),
        tenant_id=doc["tenant"]["id"],
        month=html.escape(doc["month"]),
        currency=html.escape(doc["currency"]),
        lines=lines,
        subscriptions=subs,
        payments=pays,
        total=html.escape(doc["total_text"]),
        balance=html.escape(doc["balance_text"]),
        waived=(
            f"<p>Storage past your debt limit, not charged: {html.escape(doc['storage_waived_text'])}</p>"
            if doc["storage_waived_micros"]
            else ""
        ),
    )
