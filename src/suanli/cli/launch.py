"""``suanli launch TASK.yaml``: submit a job from a task file."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml
from pydantic import ValidationError

from suanli.cli.jobs import show, wait_for
from suanli.cli.remote import api_errors, client, err_console, print_json
from suanli.control.errors import describe_validation
from suanli.control.task import Task


def load_task(path: Path) -> dict:
    """Parse and check a task file locally (errors name the field path); a
    relative ``workdir`` is resolved against the file's directory."""
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a task is a mapping with at least `run:`")
    try:
        Task.model_validate(doc)
    except ValidationError as exc:
        raise ValueError(f"{path}: {describe_validation(exc.errors())}") from None
    if doc.get("workdir"):
        doc["workdir"] = str((path.parent / str(doc["workdir"])).resolve())
    return doc


def launch(
    task_file: Path = typer.Argument(..., exists=True, dir_okay=False, help="Task YAML."),
    name: str = typer.Option(None, help="Override the task's name."),
    env: list[str] = typer.Option([], "--env", help="KEY=VALUE, added to envs (repeatable)."),
    wait: bool = typer.Option(False, "--wait", help="Wait for the job to finish, print its logs, exit with its code."),
    as_json: bool = typer.Option(False, "--json", help="Print the job as JSON."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Quote the cost per hour (and for --hours) and submit nothing."),
    hours: float = typer.Option(None, "--hours", help="With --dry-run: the job's maximum duration, for a total."),
) -> None:
    """Submit a job; the scheduler queues and places it."""
    if dry_run:  # billing's quote (suanli.cli.billing); nothing is submitted
        from suanli.cli.billing import quote_task

        return quote_task(task_file, hours, 0, None, as_json)
    try:
        task = load_task(task_file)
    except ValueError as exc:
        err_console.print(f"[red]error[/red] (invalid): {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    if name:
        task["name"] = name
    for item in env:
        key, sep, value = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--env")
        task.setdefault("envs", {})[key] = value
    with api_errors():
        job = client().launch(task)
        if wait:
            job = wait_for(job["id"])
            if not as_json:
                typer.echo(client().job_logs(job["id"]), nl=False)
    if as_json:
        print_json(job)
    else:
        show([job], False, "Job")
    if wait and job["state"] != "succeeded":
        raise typer.Exit(job["exit_code"] or 1)
