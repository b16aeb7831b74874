"""``suanli tokens``: API tokens, with scopes and an expiry; listed and revoked."""

from __future__ import annotations

import typer

from suanli.cli.remote import api_errors, client, print_json, table

app = typer.Typer(help="API tokens: create (scoped, expiring), list, revoke.", no_args_is_help=True)


def _show(rows: list[dict], as_json: bool, title: str = "Tokens") -> None:
    if as_json:
        return print_json(rows)
    table(
        title,
        ["ID", "NAME", "USER", "KIND", "PREFIX", "SCOPES", "TENANT", "EXPIRES", "LAST USED", "STATE"],
        [
            [t["id"], t["name"], t["user"], t["kind"], t["prefix"], " ".join(t["scopes"]) or "all",
             t["tenant_id"] or "", (t["expires_at"] or "never")[:19], (t["last_used_at"] or "")[:19], t["state"]]
            for t in rows
        ],
    )  # fmt: skip


@app.command("create")
def create(
    name: str = typer.Option("", "--name", help="A label."),
    scope: list[str] = typer.Option([], "--scope", help="read (GET only) or route:/v1/PATH (only paths under it); repeatable."),
    expires_days: float = typer.Option(None, "--expires-days", min=0.001, max=3660, help="Expire after this many days."),
    tenant: str = typer.Option(None, "--tenant", help="Act only inside this tenant, as a member (name or ID)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (the token is shown once)."),
) -> None:
    """Make a token for yourself: never stronger than the one you use."""
    with api_errors():
        t = client().create_token(name=name, scopes=scope, expires_in_days=expires_days, tenant=tenant)
    if as_json:
        return print_json(t)
    _show([t], False, "Token made")
    typer.echo(f"token (shown once): {t['token']}")


@app.command("list")
def list_(
    everyone: bool = typer.Option(False, "--all", help="Everyone's (admins)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List your tokens (never the tokens themselves)."""
    with api_errors():
        _show(client().tokens(everyone), as_json)


@app.command("revoke")
def revoke(
    token_id: int = typer.Argument(..., help="The token's ID (suanli tokens list)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Revoke a token: refused from now on."""
    with api_errors():
        t = client().revoke_token(token_id)
    if as_json:
        return print_json(t)
    typer.echo(f"revoked token {t['id']} ({t['prefix']}…)")
