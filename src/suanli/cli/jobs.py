"""``suanli jobs``: list, show, follow logs of and cancel jobs."""

from __future__ import annotations

import time

import typer

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

app = typer.Typer(help="Batch jobs.", no_args_is_help=True)

FINAL = ("succeeded", "failed", "cancelled")


def show(rows: list[dict], as_json: bool, title: str = "Jobs") -> None:
    if as_json:
        return print_json(rows)
    table(
        title,
        [
            "ID",
            "NAME",
            "STATE",
            "EXIT",
            "GPU",
            "NODES",
            "PRIORITY",
            "PLACED ON",
            "COST",
            "RATE",
            "DEPENDS ON",
            "GROUP",
            "WHY",
            "REASON",
        ],
        [
            [
                j["id"],
                j["name"],
                j["state"],
                j["exit_code"],
                gpu_desc(j),
                j["num_nodes"],
                priority_desc(j),
                placed_on(j),
                cost_so_far(j),
                cost_rate(j),
                ",".join(map(str, j.get("depends_on") or [])),
                j.get("group") or "",
                waiting_desc(j),
                j["reason"],
            ]
            for j in rows
        ],
    )


def wait_for(job_id: int, timeout_s: float | None = None) -> dict:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    job = client().job(job_id)
    while job["state"] not in FINAL and (deadline is None or time.monotonic() < deadline):
        time.sleep(0.5)
        job = client().job(job_id)
    return job


@app.command("list")
def list_(
    state: str = typer.Option(None, help="Only jobs in this state."),
    group: str = typer.Option(None, help="Only the jobs of this pipeline or sweep (its GROUP, or the part before #)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List jobs, with what each depends on and its pipeline or sweep."""
    with api_errors():
        rows = client().jobs(state)
    if group:
        rows = [j for j in rows if j.get("group") and (j["group"] == group or j["group"].rsplit("#", 1)[0] == group)]
    show(rows, as_json)


@app.command("show")
def show_one(job_id: int, as_json: bool = typer.Option(False, "--json")) -> None:
    """One job."""
    with api_errors():
        job = client().job(job_id)
    if as_json:
        return print_json(job)
    show([job], False, "Job")
    if line := cost_line(job):
        typer.echo(line)
    if line := metrics_line(job):
        typer.echo(line)


@app.command("logs")
def logs(
    job_id: int,
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the job ends."),
    tail: int = typer.Option(None, help="Only the last N bytes."),
) -> None:
    """Print the job's output."""
    with api_errors():
        c = client()
        if not follow:
            typer.echo(c.job_logs(job_id, tail), nl=False)
            return
        shown = 0
        while True:
            state = c.job(job_id)["state"]
            text = c.job_logs(job_id)
            typer.echo(text[shown:], nl=False)
            shown = len(text)
            if state in FINAL:
                return
            time.sleep(0.5)


@app.command("cancel")
def cancel(
    job_id: int,
    wait: bool = typer.Option(True, help="Wait until it is cancelled."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Cancel a job: queued ones at once, running ones by stopping their processes."""
    with api_errors():
        job = client().cancel_job(job_id)
        if wait:
            job = wait_for(job_id, 60)
    print_json(job) if as_json else show([job], False, "Job")


@app.command("metrics")
def metrics(
    job_id: int,
    since: str = typer.Option("1h", "--since", help="How far back, e.g. 15m, 6h, 7d (older than an hour: 5-minute averages)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Its CPU, memory, GPU and sessions over time."""
    metrics_table("jobs", job_id, since, as_json)
