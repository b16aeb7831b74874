"""``suanli nodes``: list nodes, register an inventory file (operators)."""

from __future__ import annotations

from pathlib import Path

import typer

from suanli.cli.remote import api_errors, client, err_console, print_json, table

app = typer.Typer(help="Nodes and their GPUs.", invoke_without_command=True)


def _show(rows: list[dict], as_json: bool) -> None:
    if as_json:
        return print_json(rows)
    table(
        "Nodes",
        ["NAME", "STATE", "BACKEND", "GPU", "FREE", "CPU (used/total)", "MEM GiB (used/total)", "ZONE", "KIND", "VERIFIED"],
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
                verified_mark(n.get("verified")),
            ]
            for n in rows
        ],
    )


def verified_mark(v: dict | None) -> str:
    """``verified 2026-12-03 TFLOPS 81% mem 102%``, ``FAILED 2026-12-03: reason``, or "" when never verified."""
    if not v:
        return ""
    day = v["at"][:10]
    if v["status"] == "unmeasured":
        return f"unmeasured {day} (no GPU seen)"
    ratios = " ".join(
        f"{label} {v[key]:.0%}" for label, key in (("TFLOPS", "tflops_ratio"), ("mem", "memory_ratio")) if v.get(key) is not None
    )
    if v["status"] == "passed":
        return f"verified {day} {ratios}".strip()
    return f"FAILED {day}: {'; '.join(v.get('reasons') or [])}"


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
        import yaml  # only here: ``nodes list`` and the others start without a YAML parser

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


@app.command("verify")
def verify(
    name: str,
    quick: bool = typer.Option(False, "--quick", help="Small sizes and few repeats."),
    uncordon: bool = typer.Option(False, "--uncordon", help="Make the node ready again if it passes."),
    report_file: Path = typer.Option(
        None, "--report", exists=True, dir_okay=False, help="Record this `suanli verify --json` output instead of measuring here."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Run `suanli verify` here, on node NAME, and record the result (operators): a node that
    fails is cordoned with the reasons; --uncordon makes a cordoned node that passes ready."""
    import json

    if report_file is not None:
        try:
            report = json.loads(report_file.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            err_console.print(
                f"[red]error[/red]: {report_file} is not a `suanli verify --json` report: {exc}", highlight=False, soft_wrap=True
            )
            raise typer.Exit(1) from None
    else:
        with api_errors():
            node = next((n for n in client().nodes() if n["name"] == name), None)
        if node is None:
            err_console.print(f"[red]error[/red] (not_found): no node {name!r}")
            raise typer.Exit(1)
        report = _measure_here(node["gpu_model"], quick)
    with api_errors():
        row = client().add_verification(name, report, uncordon=uncordon)
    if as_json:
        return print_json(row)
    mark = verified_mark(row)
    typer.echo(f"{name}: {mark} (node {row['node_state']})")
    raise typer.Exit(0 if row["status"] != "failed" else 1)


def _measure_here(model: str, quick: bool) -> dict:
    from suanli import gpu_names
    from suanli.verify.run import Options, TorchMissing
    from suanli.verify.run import verify as run_verify

    expect = gpu_names.canonical_or_none(model)
    try:
        with err_console.status(f"verifying this machine as {model}") as status:
            return run_verify(Options(quick=quick, expect=expect), progress=lambda s: status.update(s))
    except TorchMissing as exc:
        err_console.print(f"[red]error[/red]: {exc}")
        raise typer.Exit(2) from None


@app.command("verifications")
def verifications(
    name: str,
    limit: int = typer.Option(20, "--limit", min=1, max=500),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (with --full: each whole report)."),
    full: bool = typer.Option(False, "--full", help="Include each whole report."),
) -> None:
    """A node's `suanli verify` results, newest first."""
    with api_errors():
        rows = client().verifications(name, limit, full)
    if as_json:
        return print_json(rows)
    table(
        f"Verifications of {name}",
        ["ID", "AT", "BY", "DEVICE", "GPUS", "RESULT"],
        [[r["id"], r["at"], r["actor"], r["device"], r["gpu_count"], verified_mark(r)] for r in rows],
    )
