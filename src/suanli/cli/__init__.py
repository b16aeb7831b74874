"""The ``suanli`` command line: one Typer app, one sub-module per command group.

Each group lives in its own module and is attached here, so a newcomer finds the
``suanli X`` command in ``suanli/cli/X.py``.
"""

from __future__ import annotations

import typer

from suanli.cli import advise, billing, controlplane, plan, sim, tco

app = typer.Typer(no_args_is_help=True, help="Suanli (算力): rent, schedule and bill GPU compute.")
app.add_typer(sim.app, name="sim")
app.add_typer(advise.app, name="advise")
app.command("tco")(tco.tco)
app.command("plan")(plan.plan)
controlplane.register(app)
billing.register(app)


def main() -> None:
    app()
