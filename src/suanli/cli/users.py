"""``suanli users``: people and programs that use the platform; passwords and the second factor."""

from __future__ import annotations

import typer

from suanli.cli.remote import api_errors, client, err_console, print_json, table

app = typer.Typer(help="Users: create, list, disable (admins); your password and second factor.", no_args_is_help=True)


def _show(rows: list[dict], as_json: bool, title: str = "Users") -> None:
    if as_json:
        return print_json(rows)
    table(
        title,
        ["ID", "NAME", "ROLE", "TENANT", "PASSWORD", "2FA", "STATE"],
        [
            [u["id"], u["name"], u["role"], u["tenant_id"], "yes" if u.get("has_password") else "no",
             "on" if u.get("two_factor") else "off", "disabled" if u.get("disabled") else "active"]
            for u in rows
        ],
    )  # fmt: skip


def _password(prompt: str) -> str:
    return typer.prompt(prompt, hide_input=True, confirmation_prompt=True)


@app.command("create")
def create(
    name: str = typer.Argument(..., help="The user's name (letters, digits, . _ @ -)."),
    tenant: str = typer.Option(None, "--tenant", help="Name or ID [default: yours]."),
    role: str = typer.Option("member", "--role", help="member, operator or admin."),
    password: bool = typer.Option(False, "--password", help="Ask for a console password for them."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (its token is shown once)."),
) -> None:
    """Create a user; their first API token is printed once."""
    secret = _password("Password") if password else None
    with api_errors():
        u = client().create_user(name, role, tenant, secret)
    if as_json:
        return print_json(u)
    typer.echo(f"user {u['id']}: {u['name']} ({u['role']}, tenant {u['tenant_id']})")
    typer.echo(f"token (shown once): {u['token']}")


@app.command("list")
def list_(
    tenant: str = typer.Option(None, "--tenant", help="Only this tenant's (name or ID)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List users (admins and operators)."""
    with api_errors():
        _show(client().users(tenant), as_json)


@app.command("disable")
def disable(
    user: str = typer.Argument(..., help="Name or ID."),
    enable: bool = typer.Option(False, "--enable", help="Enable them again."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Disable a user: their tokens and sign-ins are refused at once (their work runs on)."""
    with api_errors():
        u = client().change_user(user, disabled=not enable)
    if as_json:
        return print_json(u)
    _show([u], False, "User changed")


@app.command("passwd")
def passwd(user: str = typer.Argument(None, help="Another user's name or ID (admins) [default: you].")) -> None:
    """Set a console password: yours (asks for the current one), or, as an admin, anyone's."""
    with api_errors():
        if user:
            client().change_user(user, password=_password("New password"))
        else:
            current = typer.prompt("Current password (empty: none yet)", hide_input=True, default="", show_default=False)
            client().request("PUT", "/v1/me/password", json={"password": _password("New password"), "current": current or None})
    typer.echo("password set")


@app.command("2fa")
def two_factor(
    action: str = typer.Argument(..., help="enrol, confirm CODE, off CODE, or reset USER (admins: a lost device)."),
    value: str = typer.Argument(None, help="The code from your authenticator app, or the user to reset."),
) -> None:
    """Your second factor (TOTP): enrol prints a secret for your app; confirm turns it on."""
    with api_errors():
        if action == "enrol":
            e = client().request("POST", "/v1/me/2fa")
            typer.echo(f"secret (add it to your authenticator app): {e['secret']}\nURI: {e['uri']}")
            typer.echo("then: suanli users 2fa confirm CODE")
        elif action in ("confirm", "off") and value:
            client().request("POST", f"/v1/me/2fa/{'confirm' if action == 'confirm' else 'disable'}", json={"code": value})
            typer.echo("two-factor sign-in is " + ("on" if action == "confirm" else "off"))
        elif action == "reset" and value:
            client().change_user(value, reset_2fa=True)
            typer.echo(f"two-factor sign-in of {value} is off")
        else:
            err_console.print("[red]error[/red]: use enrol, confirm CODE, off CODE or reset USER", highlight=False)
            raise typer.Exit(2)
