"""``suanli usage | bill | invoice | prices | topup | grants | budget | subscriptions |
quote | rate``: what work costs, before and after it runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from suanli.cli.remote import api_errors, client, err_console, print_json, table

prices_app = typer.Typer(help="The price book (operators change it; every change is a new version).", no_args_is_help=True)
grants_app = typer.Typer(
    help="Quotas: GPU grants per tenant (model, concurrent GPUs, GPU-minutes, QoS, expiry).", no_args_is_help=True
)
budget_app = typer.Typer(help="A tenant's monthly budget: alert thresholds and an optional hard cap.", no_args_is_help=True)
terms_app = typer.Typer(
    help="Payment terms: prepaid (the default), credit or post-paid; grace period; low-balance alert.",
    no_args_is_help=True,
)
subs_app = typer.Typer(help="Monthly (包月) and one-year reserved subscriptions.", no_args_is_help=True)


def _req(method: str, path: str, **kw: Any) -> Any:
    return client().request(method, path, **kw)


def _dec(text: str, places: int) -> str:
    from decimal import Decimal

    return f"{Decimal(text):,.{places}f}"


def _plan(plan: str | None) -> str:
    """A plan as the flags take it (``on-demand``), not as the API's JSON keys it
    (``on_demand``): a table should print what a renter can type back."""
    return (plan or "").replace("_", "-")


def _params(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v not in (None, False)}


def usage(
    tenant: str = typer.Option(None, help="Tenant name or id (operators)."),
    since: str = typer.Option(None, help="ISO time: records from this period on."),
    limit: int = typer.Option(1000, help="At most this many records, newest first."),
    all_: bool = typer.Option(False, "--all", help="Every tenant (operators)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Usage records: per workload and rating period, billed in 6-second units."""
    with api_errors():
        rows = _req("GET", "/v1/billing/usage", params=_params(tenant=tenant, since=since, limit=limit, all=all_))
    if as_json:
        return print_json(rows)
    table(
        "Usage",
        ["WORKLOAD", "KIND", "GPU", "PLAN", "STARTED", "ENDED", "BILLED S", "AMOUNT"],
        [
            [
                f"{r['workload_kind'] or '-'} {r['workload_id'] or ''}",
                r["kind"],
                r["gpu_model"] or "-",
                _plan(r["plan"]),
                r["started_at"],
                r["ended_at"],
                r["billed_seconds"],
                f"{r['amount']:.6f} {r['currency']}",
            ]
            for r in rows
        ],
    )


def bill(
    tenant: str = typer.Option(None, help="Tenant name or id (operators)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Prepaid balance and this month's charges."""
    with api_errors():
        b = _req("GET", "/v1/billing/bill", params=_params(tenant=tenant))
    if as_json:
        return print_json(b)
    typer.echo(f"tenant {b['tenant']} ({b['tenant_id']})  period {b['period']}")
    typer.echo(
        f"balance: {b['balance_text']}    charges this month: {b['current_period_total_text']}"
        f"    accruing, not yet rated: {b['accruing_text']}"
        + (f"    ended, being rated: {b['ended_unrated_text']}" if b.get("ended_unrated_micros") else "")
    )
    if b.get("terms"):
        typer.echo(f"terms: {_terms_text(b['terms'])}")
    if b["budget"]:
        bd = b["budget"]
        limit = f"{bd['limit']:.2f} {b['currency']}/month" if bd["limit"] is not None else "no monthly limit"
        typer.echo(f"budget: {limit}, alerts at {bd['thresholds']} %, hard cap {'on' if bd['hard_cap'] else 'off'}")
    table(
        "Charges this month",
        ["KIND", "GPU", "PLAN", "BILLED S", "AMOUNT"],
        [[c["kind"], c["gpu_model"] or "-", _plan(c["plan"]), c["billed_seconds"], c["amount_text"]] for c in b["charges"]],
    )
    for n in b["notices"][:5]:
        typer.echo(f"[{n['kind']}] {n['message']}")


def invoice(
    month: str = typer.Argument(..., help="YYYY-MM"),
    tenant: str = typer.Option(None, help="Tenant name or id (operators)."),
    html: Path = typer.Option(None, "--html", help="Write the printable HTML invoice here."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """A monthly invoice as JSON, or a printable HTML page."""
    with api_errors():
        if html is not None:
            c = client()
            r = c.http.get(
                "/v1/billing/invoice",
                params=_params(month=month, tenant=tenant, format="html"),
                headers={"Authorization": f"Bearer {c.token}"} if c.token else {},
            )
            if r.status_code >= 400:
                err_console.print(f"[red]error[/red]: {r.text}", highlight=False)
                raise typer.Exit(1)
            html.write_text(r.text, encoding="utf-8")
            typer.echo(f"wrote {html}")
            return
        doc = _req("GET", "/v1/billing/invoice", params=_params(month=month, tenant=tenant))
    if as_json:
        return print_json(doc)
    table(
        f"Invoice {doc['month']} - {doc['tenant']['name']}",
        ["KIND", "GPU", "PLAN", "QUANTITY", "AMOUNT"],
        [[ln["kind"], ln["gpu_model"] or "-", _plan(ln["plan"]), ln["quantity"], ln["amount_text"]] for ln in doc["lines"]],
    )
    typer.echo(f"total {doc['total_text']}   balance {doc['balance_text']}")


@prices_app.command("list")
def prices_list(
    as_json: bool = typer.Option(False, "--json"),
    sources: bool = typer.Option(False, "--sources", help="Also show where each price comes from (seed quotes, rules)."),
) -> None:
    """Current prices per GPU model and plan (``--sources``: where each comes from)."""
    with api_errors():
        p = _req("GET", "/v1/billing/prices")
    if as_json:
        return print_json(p)
    b = p["book"]
    table(
        f"Price book v{p['version']} ({b['currency']})",
        ["GPU", "ON-DEMAND /h", "MONTHLY /GPU", "RESERVED /GPU-yr", "SPOT /h", *(["SOURCE"] if sources else [])],
        [
            [
                g["model"],
                _dec(g["on_demand"], 4),
                _dec(g["monthly"], 2),
                _dec(g["reserved"], 2),
                f"{_dec(g['spot_floor'], 4)}..{_dec(g['spot_cap'], 4)}",
                *([g["sources"].get("on_demand", "")[:60]] if sources else []),
            ]
            for g in b["gpus"]
        ],
    )
    typer.echo(
        f"storage {b['storage']['per_gib_month']}/GiB-month (stopped {b['storage']['stopped_per_gib_month']}), "
        f"transfer {b['transfer']['per_gib']}/GiB"
    )
    for v in p["versions"][-5:]:
        typer.echo(f"  v{v['version']} {_since(v)} by {v['author']}: {v['note']}")


def _since(v: dict) -> str:
    """When a version took effect. The first version applies from the start of the
    platform's history (its effective time is the epoch, so usage of any age has a
    price): say that, and when it was written, rather than print 1970-01-01."""
    if v.get("since_start"):
        created = f", written {v['created_at']}" if v.get("created_at") else ""
        return f"since the platform started{created}"
    return f"from {v['effective_at']}"


@prices_app.command("set")
def prices_set(
    model: str = typer.Argument(..., help="GPU model, or '-' for storage/storage_stopped/transfer."),
    plan: str = typer.Argument(
        ..., help="on-demand | monthly | reserved | spot | spot-floor | spot-cap | storage | storage-stopped | transfer"
    ),
    price: str = typer.Argument(
        ..., help="Decimal in the book's currency (per GPU-hour, GPU-month, GPU-term, GiB-month or GiB)."
    ),
    note: str = typer.Option("", help="Why (kept with the version)."),
) -> None:
    """Change one price: a new version, effective now; rated usage keeps its price."""
    with api_errors():
        p = _req(
            "PUT",
            "/v1/billing/prices",
            json={"gpu_model": None if model == "-" else model, "plan": plan.replace("-", "_"), "price": price, "note": note},
        )
    typer.echo(f"price book version {p['version']}")


def topup(
    tenant: str = typer.Argument(..., help="Tenant name or id."),
    amount: str = typer.Argument(..., help="Amount in the book's currency, e.g. 500 or 99.90."),
    key: str = typer.Option(None, help="Idempotency key (e.g. the bank transfer id): a repeat posts nothing."),
    memo: str = typer.Option("", help="Shown on the invoice."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Credit a tenant's prepaid balance (operators)."""
    with api_errors():
        r = _req("POST", "/v1/billing/topups", json={"tenant": tenant, "amount": amount, "key": key, "memo": memo})
    print_json(r) if as_json else typer.echo(f"{'posted' if r['posted'] else 'already posted'}; balance {r['balance']:.2f}")


@grants_app.command("list")
def grants_list(tenant: str = typer.Option(None), as_json: bool = typer.Option(False, "--json")) -> None:
    """Grants (yours; operators: every tenant's)."""
    with api_errors():
        rows = client().pages("/v1/billing/grants", _params(tenant=tenant))
    if as_json:
        return print_json(rows)
    table(
        "Grants",
        ["ID", "TENANT", "GPU", "MAX GPUS", "GPU-MINUTES", "QOS", "EXPIRES"],
        [
            [
                g["id"],
                g["tenant_id"],
                g["gpu_model"] or "any",
                g["max_gpus"],
                g["gpu_minutes"] or "-",
                g["qos"],
                g["expires_at"] or "-",
            ]
            for g in rows
        ],
    )


@grants_app.command("add")
def grants_add(
    tenant: str = typer.Argument(...),
    max_gpus: float = typer.Option(..., "--max-gpus", help="Concurrent GPUs (fractions allowed)."),
    gpu: str = typer.Option(None, "--gpu", help="GPU model (default: any)."),
    gpu_minutes: int = typer.Option(None, "--gpu-minutes", help="GPU-minute budget."),
    qos: str = typer.Option("on-demand", help="spot | on-demand | reserved: the highest class admitted."),
    expires: str = typer.Option(None, help="ISO time the grant ends."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Grant a tenant GPUs (operators). Without any grant a tenant is unlimited."""
    with api_errors():
        g = _req(
            "POST",
            "/v1/billing/grants",
            json={
                "tenant": tenant,
                "gpu_model": gpu,
                "max_gpus": max_gpus,
                "gpu_minutes": gpu_minutes,
                "qos": qos,
                "expires_at": expires,
            },
        )
    print_json(g) if as_json else typer.echo(f"grant {g['id']}")


@grants_app.command("rm")
def grants_rm(grant_id: int) -> None:
    """Revoke a grant (operators)."""
    with api_errors():
        _req("DELETE", f"/v1/billing/grants/{grant_id}")
    typer.echo(f"revoked grant {grant_id}")


@budget_app.command("show")
def budget_show(tenant: str = typer.Option(None), as_json: bool = typer.Option(False, "--json")) -> None:
    with api_errors():
        b = _req("GET", "/v1/billing/bill", params=_params(tenant=tenant))
    print_json(b["budget"]) if as_json else typer.echo(b["budget"] or "no budget set")


@budget_app.command("set")
def budget_set(
    limit: str = typer.Option(None, help="Monthly limit in the book's currency (omit: balance-only cap)."),
    alert: list[int] = typer.Option([50, 80, 100], "--alert", help="Alert threshold in % (repeatable)."),
    hard_cap: bool = typer.Option(False, "--hard-cap", help="Stop instances after notice when money runs out."),
    notice: int = typer.Option(300, help="Seconds of notice before the hard cap stops work."),
    tenant: str = typer.Option(None, help="Tenant (operators)."),
) -> None:
    """Set the monthly budget."""
    with api_errors():
        b = _req(
            "PUT",
            "/v1/billing/budget",
            json={"tenant": tenant, "limit": limit, "thresholds": alert, "hard_cap": hard_cap, "notice_s": notice},
        )
    typer.echo(b)


@budget_app.command("changes")
def budget_changes(tenant: str = typer.Option(None), as_json: bool = typer.Option(False, "--json")) -> None:
    """Who changed the budget, when, from what to what."""
    with api_errors():
        rows = client().pages("/v1/billing/budget/changes", _params(tenant=tenant))
    if as_json:
        return print_json(rows)
    table("Budget changes", ["AT", "BY", "ROLE", "AFTER"], [[r["at"], r["user"], r["role"], r["after"]] for r in rows])


def _terms_text(t: dict) -> str:
    credit = f", credit {t['credit_limit']:.2f}" if t["terms"] == "credit" else ""
    low = f"{t['low_balance']:.2f}" if t["low_balance"] is not None else "off"
    return (
        f"{t['terms']}{credit}; balance {t['balance']:.2f} {t['currency']}, accruing {t['accruing']:.2f}, "
        f"left: {t['left_text']}; grace {t['grace_s']} s; low-balance alert: {low}"
        + ("" if t["terms"] == "postpaid" else f"; stopped disks may run {t['storage_debt_limit']:.2f} into debt")
    )


@terms_app.command("show")
def terms_show(
    tenant: str = typer.Option(None, help="Tenant (operators)."), as_json: bool = typer.Option(False, "--json")
) -> None:
    """A tenant's terms and what it has left to spend."""
    with api_errors():
        t = _req("GET", "/v1/billing/terms", params=_params(tenant=tenant))
    print_json(t) if as_json else typer.echo(_terms_text(t))


@terms_app.command("set")
def terms_set(
    tenant: str = typer.Option(None, help="Tenant name or id (default: yours)."),
    prepaid: bool = typer.Option(False, "--prepaid", help="Pay in advance: work needs a balance (operators)."),
    postpaid: bool = typer.Option(False, "--postpaid", help="No balance limit; billed by invoice (operators)."),
    credit: str = typer.Option(None, "--credit", help="Credit terms: the balance may go this far below zero (operators)."),
    grace: int = typer.Option(None, "--grace", help="Seconds of notice before running work stops (operators)."),
    low_balance: str = typer.Option(None, "--low-balance", help='Alert when less than this is left ("" turns it off).'),
    storage_debt: str = typer.Option(
        None, "--storage-debt-limit", help="How far a stopped disk's storage may run into debt before it is waived (operators)."
    ),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Change payment terms (operators) or your low-balance alert (members too)."""
    chosen = [name for name, on in (("prepaid", prepaid), ("postpaid", postpaid), ("credit", credit is not None)) if on]
    if len(chosen) > 1:
        err_console.print(f"choose one of --prepaid, --postpaid, --credit (got {', '.join(chosen)})")
        raise typer.Exit(2)
    body = {"tenant": tenant, "terms": chosen[0] if chosen else None, "credit_limit": credit, "grace_s": grace}
    body["low_balance"], body["storage_debt_limit"] = low_balance, storage_debt
    with api_errors():
        t = _req("PUT", "/v1/billing/terms", json=body)
    print_json(t) if as_json else typer.echo(_terms_text(t))


@subs_app.command("list")
def subs_list(tenant: str = typer.Option(None), as_json: bool = typer.Option(False, "--json")) -> None:
    with api_errors():
        rows = client().pages("/v1/billing/subscriptions", _params(tenant=tenant))
    if as_json:
        return print_json(rows)
    table(
        "Subscriptions",
        ["ID", "PLAN", "GPUS", "START", "END", "FEE", "CANCELLED", "REFUND"],
        [
            [
                r["id"],
                _plan(r["plan"]),
                f"{r['gpu_count']} x {r['gpu_model']}",
                r["start"],
                r["end"],
                f"{r['fee']:.2f}",
                r["cancelled"] or "-",
                f"{r['refund_micros'] / 1e6:.2f}",
            ]
            for r in rows
        ],
    )


@subs_app.command("buy")
def subs_buy(
    plan: str = typer.Argument(..., help="monthly | reserved"),
    gpu: str = typer.Argument(...),
    count: int = typer.Argument(1),
    months: int = typer.Option(1),
    tenant: str = typer.Option(None),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Buy a term; the fee comes from the prepaid balance now."""
    with api_errors():
        r = _req(
            "POST",
            "/v1/billing/subscriptions",
            json={"tenant": tenant, "plan": plan, "gpu_model": gpu, "gpu_count": count, "months": months},
        )
    print_json(r) if as_json else typer.echo(
        f"subscription {r['id']}: {_plan(r['plan'])} {r['gpu_count']} x {r['gpu_model']} until {r['end']}, fee {r['fee']:.2f}"
    )


@subs_app.command("cancel")
def subs_cancel(sub_id: int, as_json: bool = typer.Option(False, "--json")) -> None:
    """Cancel; reserved terms refund the unused part pro rata."""
    with api_errors():
        r = _req("POST", f"/v1/billing/subscriptions/{sub_id}/cancel")
    print_json(r) if as_json else typer.echo(f"cancelled; refund {r['refund_micros'] / 1e6:.2f}")


def quote_task(task_file: Path, hours: float | None, disk: int, max_price: str | None, as_json: bool) -> None:
    """Shared by ``suanli quote`` and ``suanli launch --dry-run``."""
    # the task model (pydantic, the control plane's validation) only for the one command
    # that reads a task file: ``bill``, ``usage`` and the rest of this module start without it
    from suanli.cli.taskfile import load_task

    try:
        task = load_task(task_file)
    except ValueError as exc:
        err_console.print(f"[red]error[/red] (invalid): {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    task.pop("secrets", None)  # a quote needs none: they do not leave this machine for it
    with api_errors():
        q = _req("POST", "/v1/billing/quote", json={"task": task, "max_hours": hours, "disk_gib": disk, "max_price": max_price})
    if as_json:
        return print_json(q)
    table(
        f"Quote ({q['currency']}){'' if hours is None else f' for {hours:g} h'}",
        ["GPU", "PLAN", "GPUS", "PER HOUR", "MAX COST", "NOTE"],
        [
            [x["gpu_model"], _plan(x["plan"]), f"{x['gpus']:g}", x["per_hour_text"], x["total_text"] or "-", x["note"]]
            for x in q["quotes"]
        ],
    )


def quote(
    task_file: Path = typer.Argument(..., exists=True, dir_okay=False, help="Task YAML."),
    hours: float = typer.Option(None, "--hours", help="The job's maximum duration, for a total."),
    disk: int = typer.Option(0, "--disk", help="Disk GiB (instances)."),
    max_price: str = typer.Option(None, "--max-price", help="Spot bid per GPU-hour [default: the task's resources.max_price]."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Cost per hour and for the maximum duration, before anything starts."""
    quote_task(task_file, hours, disk, max_price, as_json)


def rate(
    cutoff_ms: int = typer.Option(
        None, help="Rate what is final at this epoch-ms (default: ended work up to now, running work's hours closed 60 s ago)."
    ),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Run a rating run now (operators; the server also runs one every 10 seconds)."""
    with api_errors():
        r = _req("POST", "/v1/billing/rate", json={"cutoff_ms": cutoff_ms})
    if as_json:
        return print_json(r)
    typer.echo(f"run {r['run_id']}: {r['inserted']} records posted, {r['skipped']} already there")
    if not r["records"]:
        typer.echo("running work is posted when its hour closes or it ends; `suanli bill` shows it as accruing")
