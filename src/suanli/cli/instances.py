"""``suanli instances``: rent an interactive GPU environment and manage it."""

from __future__ import annotations

import time

import typer

from suanli.bounds import duration_text, parse_duration
from suanli.cli import secret_args
from suanli.cli.remote import (
    api_errors,
    client,
    cost_line,
    cost_rate,
    cost_so_far,
    gpu_desc,
    metrics_line,
    metrics_table,
    placed_on,
    print_json,
    priority_desc,
    table,
    waiting_desc,
)

app = typer.Typer(help="Rent and manage instances.", no_args_is_help=True)

FINAL_OR_STABLE = ("running", "stopped", "failed", "deleted")


def runtime_desc(i: dict) -> str:
    return "process (no isolation)" if i.get("runtime") == "process" else i.get("runtime") or ""


def _show(rows: list[dict], as_json: bool, title: str = "Instances") -> None:
    if as_json:
        return print_json(rows)
    table(
        title,
        ["ID", "NAME", "STATE", "GPU", "PRIORITY", "IMAGE", "RUNTIME", "DISK", "PLACED ON", "COST", "RATE", "WHY", "REASON"],
        [
            [
                i["id"],
                i["name"],
                i["state"],
                gpu_desc(i),
                priority_desc(i),
                i["image"],
                runtime_desc(i),
                f"{i['disk_gib']} GiB",
                placed_on(i),
                cost_so_far(i),
                cost_rate(i),
                waiting_desc(i),
                i["reason"],
            ]
            for i in rows
        ],
    )


def _details(i: dict) -> None:
    _show([i], False, "Instance")
    if line := cost_line(i):
        typer.echo(line)
    if line := metrics_line(i):
        typer.echo(line)
    if i.get("autostop_s"):
        typer.echo(f"autostop: after {duration_text(i['autostop_s'])} idle (no GPU or CPU activity, no open session)")
    if i.get("notice"):
        typer.echo(f"notice: {i['notice']}")
    if i.get("ssh"):
        typer.echo(f"ssh:   {i['ssh']} -i KEYFILE   (or: suanli ssh {i['id']})")
    for port, url in (i.get("ports") or {}).items():
        typer.echo(f"port {port}: {url}")
    if i.get("gpu_access"):
        typer.echo(f"GPUs:  {i['gpu_access']}")


def _wait(instance_id: int, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    inst = client().instance(instance_id)
    while inst["state"] not in FINAL_OR_STABLE and time.monotonic() < deadline:
        time.sleep(0.3)
        inst = client().instance(instance_id)
    return inst


@app.command("create")
def create(
    gpu: str = typer.Option(
        None,
        "--gpu",
        help="GPU model and count, MODEL[:COUNT], e.g. H100:2 or a100 (any spelling of a model `suanli gpus` lists).",
    ),
    gpu_milli: int = typer.Option(0, "--gpu-milli", help="A fraction of one GPU in milli (1..999), e.g. 500."),
    image: str = typer.Option(None, help="Image name, one of `suanli images list` [default: the platform's default image]."),
    port: list[int] = typer.Option(
        [], "--port", help="Container port to publish through the server's proxy (repeatable), e.g. 8888."
    ),
    disk: int = typer.Option(50, "--disk", help="Disk GiB; kept across stop/start."),
    name: str = typer.Option("", help="A name for the instance."),
    cpus: float = typer.Option(None, help="CPU cores [default: 2 per GPU]."),
    memory: float = typer.Option(None, help="Memory GiB [default: 8 per GPU]."),
    priority: str = typer.Option("on-demand", help="on-demand | spot | reserved."),
    max_price: str = typer.Option(
        None,
        "--max-price",
        help="Spot only: the most you pay per GPU-hour, e.g. 1.20; "
        "above it the instance waits, and a running one is reclaimed with notice.",
    ),
    secret: list[str] = typer.Option([], "--secret", help=secret_args.HELP),
    autostop: str = typer.Option(
        None,
        "--autostop",
        help="Stop it (disk kept, billing stopped) after this long without GPU or CPU activity or an open "
        "SSH/port session, e.g. 30m, 2h; 0: never [default: your tenant's or the platform's].",
    ),
    wait: bool = typer.Option(False, "--wait", help="Wait until it runs (or fails)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Create an instance; it starts once the scheduler places it."""
    secrets = secret_args.parse(secret)
    try:
        autostop_s = parse_duration(autostop) if autostop is not None else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--autostop") from None
    model, count = None, 0
    if gpu:
        model, _, n = gpu.partition(":")
        count = int(n) if n.strip().isdigit() else (0 if gpu_milli else 1)
        if n and not n.strip().isdigit():
            raise typer.BadParameter(f"expected MODEL[:COUNT], got {gpu!r}", param_hint="--gpu")
        if count > 1 and gpu_milli:  # never choose between them silently (MODEL:1: the one GPU shared)
            raise typer.BadParameter(
                f"--gpu {gpu} asks for {count} whole GPU(s) and --gpu-milli {gpu_milli} for "
                f"{gpu_milli / 1000:g} of one: give --gpu {model} (no count) with --gpu-milli, or drop --gpu-milli",
                param_hint="--gpu",
            )
    with api_errors():
        inst = client().create_instance(
            name=name,
            gpu_model=model,
            gpu_count=0 if gpu_milli else count,
            gpu_milli=gpu_milli,
            image=image,
            disk_gib=disk,
            cpus=cpus,
            memory_gib=memory,
            priority=priority,
            max_price=max_price,
            ports=list(port) or None,
            secrets=secrets or None,
            autostop_s=autostop_s,
        )
        if wait:
            inst = _wait(inst["id"], 120)
    if as_json:
        return print_json(inst)
    _details(inst)


@app.command("show")
def show(instance_id: int, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """One instance, with how to reach it (ssh command, port URLs)."""
    with api_errors():
        inst = client().instance(instance_id)
    print_json(inst) if as_json else _details(inst)


@app.command("list")
def list_(
    all_: bool = typer.Option(False, "--all", help="Include deleted."), as_json: bool = typer.Option(False, "--json")
) -> None:
    """List instances."""
    with api_errors():
        _show(client().instances(all_), as_json)


@app.command("stop")
def stop(
    instance_id: int, wait: bool = typer.Option(True, help="Wait until stopped."), as_json: bool = typer.Option(False, "--json")
) -> None:
    """Stop: end its processes and free its GPUs; the disk is kept."""
    with api_errors():
        inst = client().stop_instance(instance_id)
        if wait:
            inst = _wait(instance_id, 60)
    print_json(inst) if as_json else _show([inst], False, "Instance")


@app.command("start")
def start(instance_id: int, wait: bool = typer.Option(False, "--wait"), as_json: bool = typer.Option(False, "--json")) -> None:
    """Start a stopped instance again (queued for GPUs, same disk)."""
    with api_errors():
        inst = client().start_instance(instance_id)
        if wait:
            inst = _wait(instance_id, 120)
    print_json(inst) if as_json else _show([inst], False, "Instance")


@app.command("rm")
def rm(instance_id: int, as_json: bool = typer.Option(False, "--json")) -> None:
    """Delete an instance and its disk (stops it first if it runs)."""
    with api_errors():
        inst = client().delete_instance(instance_id)
    print_json(inst) if as_json else _show([inst], False, "Instance")


@app.command("exec")
def exec_(
    instance_id: int,
    command: list[str] = typer.Argument(..., help="Command to run (quote it or put it after --)."),
    timeout: float = typer.Option(60.0, help="Seconds before it is killed."),
) -> None:
    """Run a command inside a running instance; exits with its exit code."""
    with api_errors():
        result = client().exec(instance_id, " ".join(command), timeout)
    typer.echo(result["output"], nl=False)
    raise typer.Exit(result["exit_code"])


@app.command("logs")
def logs(instance_id: int, tail: int = typer.Option(None, help="Only the last N bytes.")) -> None:
    """Print the instance's log."""
    with api_errors():
        typer.echo(client().instance_logs(instance_id, tail), nl=False)


@app.command("metrics")
def metrics(
    instance_id: int,
    since: str = typer.Option("1h", "--since", help="How far back, e.g. 15m, 6h, 7d (older than an hour: 5-minute averages)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Its CPU, memory, GPU and sessions over time."""
    metrics_table("instances", instance_id, since, as_json)
