"""``suanli tco``: rent versus build for a GPU cluster (defaults: seed 003's 256 x H100)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from suanli.advisor.pricebook import load_pricebook
from suanli.advisor.tco import SEED003_GPUS, TCOAssumptions, compute_tco
from suanli.cli.advise import console, emit_json, friendly_errors, money

_D = TCOAssumptions()


@friendly_errors
def tco(
    gpus: int = typer.Option(SEED003_GPUS, help="GPUs in the cluster"),
    model: str = typer.Option("H100", "--model", help="GPU model, e.g. H100-SXM"),
    utilization: float = typer.Option(
        _D.utilization, "--utilization", "--utilisation", help="Share of hours the GPUs do paid work"
    ),
    gpu_price: float | None = typer.Option(None, help="Purchase price per GPU (default: seed 003)"),
    servers_network_per_gpu: float = typer.Option(_D.servers_network_per_gpu, help="Servers + network capex per GPU"),
    facility_power_per_gpu_year: float = typer.Option(
        _D.facility_power_per_gpu_year, help="Facility, power, cooling per GPU-year"
    ),
    operations_per_gpu_year: float = typer.Option(_D.operations_per_gpu_year, help="Operations staff per GPU-year"),
    years: float = typer.Option(_D.depreciation_years, help="Depreciation years"),
    residual: float = typer.Option(_D.residual_fraction, help="Resale value left after the depreciation years (0-1)"),
    rent_price: float | None = typer.Option(None, help="Rental price per GPU-hour (default: price book)"),
    pricebook: Path | None = typer.Option(None, help="Price book YAML (default: seed prices)"),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object for scripts"),
) -> None:
    """Rent versus build: cost per used GPU-hour and the break-even utilisation."""
    book = load_pricebook(pricebook)
    result = compute_tco(
        TCOAssumptions(
            gpus=gpus,
            gpu_model=model,
            gpu_price=gpu_price,
            servers_network_per_gpu=servers_network_per_gpu,
            facility_power_per_gpu_year=facility_power_per_gpu_year,
            operations_per_gpu_year=operations_per_gpu_year,
            depreciation_years=years,
            residual_fraction=residual,
            utilization=utilization,
            rent_per_gpu_hour=rent_price,
        ),
        book,
    )
    if json_out:
        return emit_json(result)
    cur = result.currency
    table = Table(title=f"Build {result.gpus} x {result.gpu_model} at {result.utilization:.0%} utilisation")
    table.add_column("per used GPU-hour")
    table.add_column(cur, justify="right")
    for name, value in result.components_per_gpu_hour.items():
        table.add_row(name.replace("_", " "), f"{value:,.2f}")
    table.add_row("[bold]build[/bold]", f"[bold]{result.build_cost_per_gpu_hour:,.2f}[/bold]")
    table.add_row("rent", f"{result.rent_cost_per_gpu_hour:,.2f}")
    console.print(table)
    console.print(
        f"capex {money(result.capex, cur)}; {years:g}-year cost of ownership "
        f"{money(result.total_cost_of_ownership, cur)} before resale of {money(result.resale_value, cur)}"
    )
    console.print(
        f"break-even utilisation: [bold]{result.break_even_utilization:.0%}[/bold] — "
        f"below it renting is cheaper; at {result.utilization:.0%} [bold]{result.cheaper}[/bold] wins"
    )
    for note in result.notes:
        console.print(f"[dim]note: {note}[/dim]")
    return None
