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
