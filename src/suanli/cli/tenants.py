"""``suanli tenants``: the platform's customers (admins)."""

from __future__ import annotations

import typer

from suanli.cli.remote import api_errors, client, print_json, table

app = typer.Typer(help="Tenants: create and list them; require a second factor at sign-in (admins).", no_args_is_help=True)


def _show(rows: list[dict], as_json: bool, title: str = "Tenants") -> None:
    if as_json:
        return print_json(rows)
    table(title, ["ID", "NAME", "2FA REQUIRED"], [[t["id"], t["name"], "yes" if t.get("require_2fa") else "no"] for t in rows])


@app.command("create")
def create(
    name: str = typer.Argument(..., help="The tenant's name (letters, digits, . _ -)."),
    require_2fa: bool = typer.Option(False, "--require-2fa", help="Its people sign in to the console with a TOTP code too."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Create a tenant (prepaid until its terms are changed: suanli terms)."""
    with api_errors():
        t = client().create_tenant(name, require_2fa)
    if as_json:
        return print_json(t)
    typer.echo(f"tenant {t['id']}: {t['name']}")


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List tenants."""
    with api_errors():
        _show(client().tenants(), as_json)


@app.command("require-2fa")
def require_2fa(
    tenant: str = typer.Argument(..., help="Name or ID."),
    off: bool = typer.Option(False, "--off", help="Stop requiring it."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Require a TOTP code at console sign-in for the tenant's people (--off: stop)."""
    with api_errors():
        t = client().change_tenant(tenant, not off)
    if as_json:
        return print_json(t)
    _show([t], False, "Tenant changed")


webhook_app = typer.Typer(help="The tenant's alert webhook (signed JSON POSTs).", no_args_is_help=True)
app.add_typer(webhook_app, name="webhook")


@webhook_app.command("set")
def webhook_set(
    tenant: str = typer.Argument(..., help="The tenant."),
    url: str = typer.Argument(..., help="http(s) URL its alerts are POSTed to."),
    secret: str = typer.Option(
        None, "--secret", envvar="SUANLI_WEBHOOK_SECRET", help="HMAC key (16+ characters) [default: one is made and shown once]."
    ),
) -> None:
    """POST the tenant's alerts (idle, low balance, job failed, node down, budget) to URL, each
    signed: X-Suanli-Signature: sha256=HMAC-SHA256(secret, body)."""
    with api_errors():
        out = client().set_webhook(tenant, url, secret)
    typer.echo(f"webhook of {tenant}: {out['url']}")
    if not secret:
        typer.echo(f"secret (shown once): {out['secret']}")


@webhook_app.command("show")
def webhook_show(tenant: str = typer.Argument(..., help="The tenant.")) -> None:
    with api_errors():
        out = client().webhook(tenant)
    typer.echo(out["url"] or "no webhook")


@webhook_app.command("rm")
def webhook_rm(tenant: str = typer.Argument(..., help="The tenant.")) -> None:
    with api_errors():
        client().remove_webhook(tenant)
    typer.echo(f"webhook of {tenant} removed")


@app.command("autostop")
def autostop(
    tenant: str = typer.Argument(..., help="The tenant."),
    window: str = typer.Argument(..., help="Idle window of its new instances, e.g. 30m or 2h; off: none."),
) -> None:
    """The idle auto-stop window the tenant's new instances get when they ask none (admins, operators)."""
    from suanli.bounds import duration_text, parse_duration

    try:
        seconds = None if window.lower() in ("off", "none", "0") else parse_duration(window)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="WINDOW") from None
    with api_errors():
        t = client().set_tenant_autostop(tenant, seconds)
    typer.echo(
        f"{t['name']}: "
        + (f"new instances stop after {duration_text(t['autostop_s'])} idle" if t["autostop_s"] else "no default auto-stop")
    )


@app.command("alerts")
def alerts(
    tenant: str = typer.Option(None, "--tenant", help="Only this tenant's (operators)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Alerts and their webhook delivery, oldest first."""
    with api_errors():
        rows = client().alerts(tenant)
    if as_json:
        return print_json(rows)
    table(
        "Alerts",
        ["ID", "WHEN", "TENANT", "KIND", "OBJECT", "MESSAGE", "DELIVERY"],
        [[a["id"], a["created_at"][:19], a["tenant_id"], a["kind"], a["object"], a["message"], a["delivery"]] for a in rows],
    )
