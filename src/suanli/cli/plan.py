"""``suanli plan``: reserved + monthly + on-demand + spot mix for a demand profile."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from suanli.advisor.errors import AdvisorError
from suanli.advisor.plan import decision_tree_plan, load_demand, optimal_plan, plan_prices
from suanli.advisor.pricebook import load_pricebook
from suanli.cli.advise import console, emit_json, friendly_errors, money


@friendly_errors
def plan(
    demand: Path = typer.Option(..., "--demand", help="CSV of GPUs needed per hour (a 'gpus' column)"),
    gpu: str = typer.Option("A100", help="GPU model to buy"),
    provider: str | None = typer.Option(None, help="Provider in the price book (default: most plans quoted)"),
    tolerance: float = typer.Option(0.5, help="Share of each hour's demand allowed on spot (0-1)"),
    mode: str = typer.Option("optimal", help="optimal (MILP) | simple (seed 004 decision tree)"),
    monthly: bool = typer.Option(True, "--monthly/--no-monthly", help="Allow monthly GPUs (optimal mode)"),
    elastic: bool = typer.Option(
        True, "--elastic/--no-elastic", help="Simple mode: must scale at any time (on-demand + spot) or not (spot only)"
    ),
    gang_size: int = typer.Option(8, help="GPUs per job on spot (reclaim of any one stops the job)"),
    pricebook: Path | None = typer.Option(None, help="Price book YAML (default: seed prices)"),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object for scripts"),
) -> None:
    """Cheapest purchase plan for a demand profile, and its saving against all on-demand."""
    if mode not in ("optimal", "simple"):
        raise AdvisorError(f"unknown mode {mode!r}; choose optimal or simple")
    book = load_pricebook(pricebook)
    prices = plan_prices(book, gpu, provider, gang_size)
    hourly = load_demand(demand)
    if mode == "optimal":
        result = optimal_plan(hourly, prices, book, tolerance, use_monthly=monthly)
    else:
        result = decision_tree_plan(hourly, prices, book, tolerance, needs_elastic=elastic)
    if json_out:
        return emit_json(result)
    cur = result.currency
    table = Table(
        title=f"{result.mode} plan: {result.gpu} from {result.provider}, {result.hours} h, "
        f"peak {result.peak_gpus:g}, mean {result.mean_gpus:.1f} GPUs"
    )
    for col in ("plan", "amount", "price/GPU-h", "cost"):
        table.add_column(col, justify="right" if col != "plan" else "left")
    table.add_row(
        "reserved", f"{result.reserved_gpus} GPUs held", money(prices.reserved, cur), money(result.cost["reserved"], cur)
    )
    if any(result.monthly_gpus):
        table.add_row(
            "monthly",
            " / ".join(str(m) for m in result.monthly_gpus) + " GPUs per month",
            money(prices.monthly, cur),
            money(result.cost["monthly"], cur),
        )
    table.add_row(
        "on-demand",
        f"{result.on_demand_gpu_hours:,.0f} GPU-h",
        money(prices.on_demand, cur),
        money(result.cost["on_demand"], cur),
    )
    table.add_row(
        "spot",
        f"{result.spot_gpu_hours:,.0f} GPU-h (+{prices.spot_overhead:.0%} re-work)",
        money(prices.spot, cur),
        money(result.cost["spot"], cur),
    )
    table.add_row("[bold]total[/bold]", "", "", f"[bold]{money(result.total_cost, cur)}[/bold]")
    console.print(table)
    console.print(f"all on-demand: {money(result.all_on_demand_cost, cur)} → saving [bold]{result.saving_fraction:.1%}[/bold]")
    for note in result.notes:
        console.print(f"[dim]note: {note}[/dim]")
    return None
