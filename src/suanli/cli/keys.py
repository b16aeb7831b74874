"""``suanli keys``: the SSH public keys that open your instances (``suanli ssh``, plain ``ssh``)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from suanli.bounds import MAX_KEY_TEXT, looks_private
from suanli.cli.remote import api_errors, client, err_console, print_json, table

app = typer.Typer(help="Your SSH public keys: they open your instances, nobody else's.", no_args_is_help=True)


def _show(rows: list[dict], as_json: bool, title: str = "SSH keys") -> None:
    if as_json:
        return print_json(rows)
    table(
        title,
        ["ID", "NAME", "TYPE", "FINGERPRINT", "ADDED"],
        [[k["id"], k["name"], k["type"], k["fingerprint"], str(k["created_at"])[:19]] for k in rows],
    )


def _fail(message: str) -> None:
    err_console.print(f"[red]error[/red]: {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def read_public_key(file: str) -> str:
    """The text of a public key file ("-": stdin), refused here, before anything is sent,
    when it is a private key, so a slip of the tab key never puts a secret on the wire."""
    if file == "-":
        return sys.stdin.read(MAX_KEY_TEXT + 1)
    path = Path(file).expanduser()
    if not path.is_file():
        hint = " (make one with: ssh-keygen -t ed25519)" if not path.exists() else ""
        _fail(f"{file}: no such file{hint}")
    with open(path, errors="replace") as f:
        text = f.read(MAX_KEY_TEXT + 1)
    if looks_private(text):
        pub = Path(str(path) + ".pub")
        hint = (
            f"; its public key is {pub}: suanli keys add {pub}"
            if pub.is_file()
            else f"; write its public key with: ssh-keygen -y -f {file} > {file}.pub"
        )
        _fail(f"{file} looks like a PRIVATE key; nothing was sent or stored{hint}")
    return text


@app.command("add")
def add(
    file: str = typer.Argument(..., help="A public key file, e.g. ~/.ssh/id_ed25519.pub ('-': stdin)."),
    name: str = typer.Option("", "--name", help="A label; without it, the key's comment."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Add a public key: it opens your running and future instances."""
    text = read_public_key(file)
    with api_errors():
        key = client().add_key(text, name)
    if as_json:
        return print_json(key)
    _show([key], False, "SSH key added")


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List your keys."""
    with api_errors():
        _show(client().keys(), as_json)


@app.command("rm")
def rm(
    key: str = typer.Argument(..., help="The key's ID or its SHA256:... fingerprint."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Remove a key: it stops opening your instances, running ones included."""
    with api_errors():
        row = client().remove_key(key)
    if as_json:
        return print_json(row)
    typer.echo(f"removed key {row['id']} ({row['fingerprint']})")
