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
        None, "--report", exists=True, dir_okay=False, help="Record this `suanli verify --json` output instead of measuring."
    ),
    here: bool = typer.Option(False, "--here", help="Measure on this machine (a shell on node NAME), not as a job there."),
    image: str = typer.Option(
        None, "--image", help="Catalog image of the job (default: `verify` where offered, else the default image)."
    ),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait for the job's result, or only queue it."),
    timeout: float = typer.Option(3600.0, "--timeout", min=1, help="Seconds to wait for the result."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Verify node NAME and record the result (operators): a job pinned to NAME takes the
    whole node (every GPU, CPU and memory; it runs even on a node cordoned for failing) and
    runs `suanli verify --json` in its own container, so it measures what a renter gets.
    A node that fails is cordoned with the reasons; --uncordon makes a cordoned node that
    passes ready. --report FILE records a report made elsewhere; --here measures this machine."""
    import json

    if report_file is not None or here:
        if report_file is not None:
            try:
                report = json.loads(report_file.read_text("utf-8"))
            except (OSError, ValueError) as exc:
                err_console.print(
                    f"[red]error[/red]: {report_file} is not a `suanli verify --json` report: {exc}",
                    highlight=False,
                    soft_wrap=True,
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
        _say_result(name, row)
        raise typer.Exit(0 if row["status"] != "failed" else 1)
    with api_errors():
        run = client().start_verify_run(name, uncordon=uncordon, quick=quick, image=image)
        if wait:
            run = _wait_run(name, run, timeout)
    if as_json:
        print_json(run)
    elif run["state"] == "waiting":
        typer.echo(
            f"{name}: verification run {run['id']} queued as job {run['job_id']} (`suanli nodes verify-run {name} {run['id']}`)"
        )
    elif run["state"] == "failed":
        err_console.print(
            f"[red]error[/red]: {name}: verification run {run['id']} failed: {run['error']}", highlight=False, soft_wrap=True
        )
    else:
        _say_result(name, run["verification"], f" job {run['job_id']}")
    if run["state"] == "failed" or (run["state"] == "recorded" and run["verification"]["status"] == "failed"):
        raise typer.Exit(1)
    if run["state"] == "waiting" and wait:
        err_console.print(
            f"[red]error[/red]: {name}: no result after {timeout:g} s; job {run['job_id']} still {run['job_state']}"
        )
        raise typer.Exit(1)


def _say_result(name: str, row: dict, job: str = "") -> None:
    typer.echo(f"{name}: {verified_mark(row)} (node {row['node_state']}{',' if job else ''}{job})")


def _wait_run(name: str, run: dict, timeout: float) -> dict:
    """Poll the run until its job ended and it was settled, or ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    pause = 0.2
    with err_console.status(f"verifying {name}: job {run['job_id']}") as status:
        while run["state"] == "waiting" and time.monotonic() < deadline:
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 1.5, 5.0)
            run = client().verify_run(name, run["id"])
            status.update(f"verifying {name}: job {run['job_id']} {run['job_state']}")
    return run


@app.command("verify-run")
def verify_run(name: str, run_id: int, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """A verification run of node NAME (`suanli nodes verify NAME --no-wait` starts one)."""
    with api_errors():
        run = client().verify_run(name, run_id)
    if as_json:
        return print_json(run)
    if run["state"] == "recorded":
        _say_result(name, run["verification"], f" job {run['job_id']}")
    else:
        typer.echo(f"{name}: run {run['id']} {run['state']} (job {run['job_id']} {run['job_state']}) {run['error']}".rstrip())


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
