"""``suanli audit``: the audit log (admins): read it, check its hash chain, export it.

``verify`` asks the server, or, with ``--db``, reads the database itself (an auditor
with the database and no server)."""

from __future__ import annotations

import typer

from suanli.cli.remote import api_errors, client, err_console, print_json, table

app = typer.Typer(help="The audit log: list, verify the hash chain, export as JSON lines (admins).", no_args_is_help=True)


@app.command("list")
def list_(
    tenant_id: int = typer.Option(None, "--tenant-id", min=1, help="Only this tenant's objects."),
    actor: str = typer.Option(None, "--actor", help="Only what this user did."),
    action: str = typer.Option(None, "--action", help="Action prefix, e.g. instances. or tokens.delete."),
    since: str = typer.Option(None, "--since", help="ISO time, e.g. 2026-12-01T00:00:00Z."),
    after: int = typer.Option(0, "--after", min=0, help="Records after this ID (the pager)."),
    limit: int = typer.Option(100, "--limit", min=1, max=1000),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Records, oldest first."""
    with api_errors():
        rows = client().audit(tenant_id=tenant_id, actor=actor, action=action, since=since, after=after, limit=limit)
    if as_json:
        return print_json(rows)
    table(
        "Audit log",
        ["ID", "AT", "ACTOR", "ROLE", "TENANT", "ACTION", "OBJECT", "FROM", "RESULT"],
        [[r["id"], r["at"][:19], r["actor"], r["actor_role"], r["tenant_id"] or "", r["action"], r["object"], r["source"], r["result"]]
         for r in rows],
    )  # fmt: skip


@app.command("verify")
def verify(
    db: str = typer.Option(None, "--db", help="Check this database directly (SQLAlchemy URL) instead of asking the server."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Check the hash chain: exit 0 if intact, 1 naming the first changed or missing record."""
    if db:
        from suanli.control import audit
        from suanli.db.session import Database

        database = Database(db)
        try:
            v = audit.verify(database)
        finally:
            database.dispose()
        verdict = {"ok": v.ok, "checked": v.checked, "bad_id": v.bad_id, "problem": v.problem}
    else:
        with api_errors():
            verdict = client().audit_verify()
    if as_json:
        print_json(verdict)
    elif verdict["ok"]:
        typer.echo(f"audit log intact: {verdict['checked']} records chain")
    else:
        err_console.print(f"[red]audit log broken at record {verdict['bad_id']}[/red]: {verdict['problem']}", highlight=False)
    raise typer.Exit(0 if verdict["ok"] else 1)


@app.command("export")
def export(since: str = typer.Option(None, "--since", help="ISO time: records from then.")) -> None:
    """Every record as JSON lines on stdout (suanli audit export > audit.jsonl)."""
    with api_errors():
        for line in client().audit_export(since):
            typer.echo(line)
