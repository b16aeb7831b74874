"""The ``suanli`` command line: one Typer app, one sub-module per command group.

Each command lives in its own module, named in ``COMMANDS`` below, so a newcomer finds
``suanli X`` in ``suanli/cli/X.py``. A module is imported only when its command runs:
``suanli instances list`` talks to the server and needs httpx, not NumPy, SQLAlchemy or
the simulator, and a CLI people wait on must start at once. ``suanli --help`` imports
nothing at all; it prints the one-line help kept here (a test keeps it equal to each
command's own docstring).
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

# httpx imports its own command-line tool (click, pygments, rich.syntax, rich.progress: about
# a third of httpx's import time) whenever click and rich are installed, as they are here, and
# suanli never runs it. ``None`` in ``sys.modules`` makes that optional import fail as it does
# without them, which httpx expects (its ``httpx.main`` then asks for ``httpx[cli]``).
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Entry:
    """Where ``suanli NAME`` lives: ``module.attr`` is a command function or a Typer group."""

    module: str
    attr: str
    help: str


COMMANDS: dict[str, Entry] = {
    "server": Entry(
        "suanli.cli.server",
        "app",
        "Start the control plane: API, scheduler loop, local backend (and a Slurm cluster with --backend slurm).",
    ),
    "login": Entry(
        "suanli.cli.login",
        "login",
        "Check the token against the server and save URL and token (SUANLI_URL / SUANLI_TOKEN override them).",
    ),
    "gpus": Entry(
        "suanli.cli.gpus",
        "gpus",
        "GPU models on offer: total and free whole GPUs (free milli for fractions) and the prices now, per GPU: "
        "on demand and spot per hour, monthly per month, reserved per term.",
    ),
    "verify": Entry(
        "suanli.cli.verify", "verify", "Check this machine's GPUs against the catalog: NVML identity, memory, TFLOPS, bandwidth."
    ),
    "nodes": Entry("suanli.cli.nodes", "app", "Nodes and their GPUs."),
    "instances": Entry("suanli.cli.instances", "app", "Rent and manage instances."),
    "launch": Entry(
        "suanli.cli.launch",
        "launch",
        "Submit a job, a pipeline or a sweep; workdirs are uploaded, the scheduler queues and places them.",
    ),
    "jobs": Entry("suanli.cli.jobs", "app", "Batch jobs."),
    "ssh": Entry(
        "suanli.cli.ssh", "ssh", "SSH into a running instance (plain OpenSSH), or run CMD there: suanli ssh 7 -- nvidia-smi."
    ),
    "tenants": Entry("suanli.cli.tenants", "app", "Tenants: create and list them; require a second factor at sign-in (admins)."),
    "users": Entry("suanli.cli.users", "app", "Users: create, list, disable (admins); your password and second factor."),
    "tokens": Entry("suanli.cli.tokens", "app", "API tokens: create (scoped, expiring), list, revoke."),
    "audit": Entry("suanli.cli.audit", "app", "The audit log: list, verify the hash chain, export as JSON lines (admins)."),
    "keys": Entry("suanli.cli.keys", "app", "Your SSH public keys: they open your instances, nobody else's."),
    "images": Entry("suanli.cli.images", "app", "Images renters can run: list them; operators add, remove and build them."),
    "slurm": Entry("suanli.cli.slurm", "app", "Slurm clusters as Suanli's Slurm backend sees them."),
    "usage": Entry("suanli.cli.billing", "usage", "Usage records: per workload and rating period, billed in 6-second units."),
    "bill": Entry("suanli.cli.billing", "bill", "Prepaid balance and this month's charges."),
    "invoice": Entry("suanli.cli.billing", "invoice", "A monthly invoice as JSON, or a printable HTML page."),
    "topup": Entry("suanli.cli.billing", "topup", "Credit a tenant's prepaid balance (operators)."),
    "quote": Entry("suanli.cli.billing", "quote", "Cost per hour and for the maximum duration, before anything starts."),
    "prices": Entry("suanli.cli.billing", "prices_app", "The price book (operators change it; every change is a new version)."),
    "grants": Entry(
        "suanli.cli.billing", "grants_app", "Quotas: GPU grants per tenant (model, concurrent GPUs, GPU-minutes, QoS, expiry)."
    ),
    "budget": Entry("suanli.cli.billing", "budget_app", "A tenant's monthly budget: alert thresholds and an optional hard cap."),
    "terms": Entry(
        "suanli.cli.billing",
        "terms_app",
        "Payment terms: prepaid (the default), credit or post-paid; grace period; low-balance alert.",
    ),
    "subscriptions": Entry("suanli.cli.billing", "subs_app", "Monthly (包月) and one-year reserved subscriptions."),
    "rate": Entry("suanli.cli.billing", "rate", "Run a rating run now (operators; the server also runs one every 10 seconds)."),
    "sim": Entry("suanli.cli.sim", "app", "Simulate scheduling policies on real cluster traces."),
    "advise": Entry("suanli.cli.advise", "app", "What to rent: memory, fitting GPUs, time and cost for a model."),
    "tco": Entry("suanli.cli.tco", "tco", "Rent versus build: cost per used GPU-hour and the break-even utilisation."),
    "plan": Entry(
        "suanli.cli.plan", "plan", "Cheapest purchase plan for a demand profile, and its saving against all on-demand."
    ),
}


def load(name: str) -> TyperCommand | TyperGroup:
    """The click command for ``suanli NAME``, importing its module now."""
    entry = COMMANDS[name]
    target: Any = getattr(importlib.import_module(entry.module), entry.attr)
    if isinstance(target, typer.Typer):
        group = typer.main.get_group(target)
        group.name = name
        return group
    single = typer.Typer()
    single.command(name)(target)
    command = typer.main.get_command(single)
    assert isinstance(command, TyperCommand)  # typer declares a click Command; one registered command is a TyperCommand
    return command


class LazyGroup(TyperGroup):
    """The top-level group: resolves a command on first use; help lists the table."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        if self._listing:
            return TyperCommand(cmd_name, help=COMMANDS[cmd_name].help)
        if cmd_name not in self.commands:
            self.commands[cmd_name] = load(cmd_name)
        return self.commands[cmd_name]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(cls=LazyGroup, no_args_is_help=True, help="Suanli (算力): rent, schedule and bill GPU compute.")


@app.callback()
def _root() -> None:
    """Suanli (算力): rent, schedule and bill GPU compute."""


def main() -> None:
    app()
