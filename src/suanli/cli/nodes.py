"""``suanli nodes``: list nodes, register an inventory file (operators)."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml

from suanli.cli.remote import api_errors, client, err_console, print_json, table

app = typer.Typer(help="Nodes and their GPUs.", invoke_without_command=True)


def _show(rows: list[dict], as_json: bool) -> None:
    if as_json:
        return print_json(rows)
    table(
        "Nodes",
        ["NAME", "STATE", "BACKEND", "GPU", "FREE", "CPU (used/total)", "MEM GiB (used/total)", "ZONE", "KIND"],
        [
            [
                n["name"],
                n["state"],
                n["backend"],
                f"{n['gpu_model']} x {n['gpu_count']}",
                n["gpus_free"],
                f"{n['cpu_used'] / 1000:g}/{n['cpu_milli'] / 1000:g}",
                f"{n['mem_used'] / 1024:g}/{n['memory_mib'] / 1024:g}",
                n["zone"],
                "virtual" if n["virtual"] else "real",
            ]
            for n in rows
        ],
    )


@app.callback()
def nodes(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List nodes (no sub-command) or manage them."""
    if ctx.invoked_subcommand is None:
        with api_errors():
            _show(client().nodes(), as_json)


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List nodes."""
    with api_errors():
        _show(client().nodes(), as_json)


@app.command("add")
def add(
    file: Path = typer.Argument(None, exists=True, dir_okay=False, help="Inventory YAML (a `nodes:` list)."),
    as_json: bool = typer.Option(False, "--json"),
    backend: str = typer.Option(None, "--backend", help="slurm without FILE: register the Slurm cluster's nodes (sinfo, here)."),
    slurm_conf: Path = typer.Option(None, "--slurm-conf", exists=True, dir_okay=False, help="slurm.conf [default: $SLURM_CONF]."),
) -> None:
    """Register the nodes of an inventory file, or of a Slurm cluster (all or nothing)."""
    if file is None and backend != "slurm":
        raise typer.BadParameter("give an inventory FILE, or --backend slurm to take the nodes from Slurm", param_hint="FILE")
    if file is None:
        from suanli.cli.slurm import slurm_inventory

        doc = slurm_inventory(slurm_conf)
    else:
        try:
            doc = yaml.safe_load(file.read_text())
        except yaml.YAMLError as exc:
            err_console.print(f"[red]error[/red]: {file} is not valid YAML: {exc}")
            raise typer.Exit(1) from None
        if backend and isinstance(doc, dict):
            for node in doc.get("nodes") or []:
                if isinstance(node, dict):
                    node["backend"] = backend
    with api_errors():
        _show(client().add_nodes(doc), as_json)


@app.command("cordon")
def cordon(name: str) -> None:
    """Stop placing new work on a node (its running work stays)."""
    with api_errors():
        _show([client().set_node_state(name, "cordoned")], False)


@app.command("uncordon")
def uncordon(name: str) -> None:
    """Make a cordoned or down node ready for new work again."""
    with api_errors():
        _show([client().set_node_state(name, "ready")], False)


@app.command("heartbeat")
def heartbeat(
    name: str,
    interval: float = typer.Option(5.0, "--interval", min=0.05, help="Seconds between heartbeats."),
    once: bool = typer.Option(False, "--once", help="Send one heartbeat and exit."),
) -> None:
    """Run on the node: tell the server it is alive, every --interval seconds until stopped.

    Once a node has sent a heartbeat, the server marks it down (and fails its work over)
    when it stays silent longer than the server's --heartbeat-timeout; the next heartbeat
    makes it ready again. An unreachable server is retried, a refused heartbeat ends it."""
    import time

    from suanli.client import ApiError

    c = client()
    state = None
    while True:
        try:
            node = c.heartbeat(name)
        except ApiError as exc:
            if 0 < exc.status < 500:  # refused (bad token, unknown node): retrying will not help
                err_console.print(f"[red]error[/red] ({exc.code}): {exc.message}", highlight=False, soft_wrap=True)
                raise typer.Exit(1) from None
            err_console.print(f"{'failed' if once else 'retrying'}: {exc.message}", highlight=False, soft_wrap=True)
            if once:
                raise typer.Exit(1) from None
        else:
            if node["state"] != state:
                state = node["state"]
                typer.echo(f"{name}: {state}")
        if once:
            return
        time.sleep(interval)
