"""``suanli gpus``: the GPU catalog with free capacity per model."""

from __future__ import annotations

import typer

from suanli.cli.remote import api_errors, client, print_json, table


def gpus(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """GPU models on offer: total and free whole GPUs (free milli for fractions)."""
    with api_errors():
        rows = client().gpus()
    if as_json:
        return print_json(rows)
    table(
        "GPUs",
        ["MODEL", "VENDOR", "MEMORY", "BF16 TFLOPS", "TOTAL", "FREE", "FREE (milli)", "NODES", "KIND"],
        [
            [
                g["model"],
                g.get("vendor") or "",
                f"{g['memory_gib']:g} GiB",
                f"{g['bf16_tflops']:g}" if g.get("bf16_tflops") else "",
                g["total"],
                g["free"],
                g["free_milli"],
                g["nodes"],
                "virtual" if g["virtual"] else "real",
            ]
            for g in rows
        ],
    )
