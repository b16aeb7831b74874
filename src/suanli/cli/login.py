"""``suanli login``: remember a server URL and token in the config file."""

from __future__ import annotations

import typer

from suanli.cli.remote import api_errors
from suanli.client import DEFAULT_URL, Settings, SuanliClient, save_settings


def login(
    url: str = typer.Option(DEFAULT_URL, "--url", help="Server URL."),
    token: str = typer.Option(..., "--token", prompt=True, hide_input=True, help="API token."),
) -> None:
    """Check the token against the server and save URL and token (SUANLI_URL / SUANLI_TOKEN override them)."""
    with api_errors():
        me = SuanliClient(url, token).me()
    path = save_settings(Settings(url, token))
    typer.echo(f"logged in to {url} as {me['name']} ({me['role']}); saved to {path}")
