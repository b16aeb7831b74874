"""``suanli gpus``: the GPU catalog with free capacity and prices per model."""

from __future__ import annotations

import typer

from suanli.cli.remote import api_errors, client, money, print_json, table


def gpus(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """GPU models on offer: total and free whole GPUs (free milli for fractions) and the
    prices now, per GPU: on demand and spot per hour, monthly per month, reserved per term."""
    with api_errors():
        rows = client().gpus()
    if as_json:
        return print_json(rows)
    table(
        "GPUs",
        [
            "MODEL",
            "VENDOR",
            "MEMORY",
            "BF16 TFLOPS",
            "TOTAL",
            "FREE",
            "FREE (milli)",
            "NODES",
            "KIND",
            "ON DEMAND/GPU-h",
            "SPOT NOW/GPU-h",
            "MONTHLY/GPU",
            "RESERVED/GPU",
            "VERIFIED",
        ],
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
                money(g.get("price_per_gpu_hour"), g.get("currency")) or "not priced",
                money(g.get("spot_price_per_gpu_hour"), g.get("currency")),
                money(g.get("monthly_price_per_gpu"), g.get("currency")),
                _reserved(g),
                _verified(g.get("verified")),
            ]
            for g in rows
        ],
    )


def _reserved(g: dict) -> str:
    """``¥73,584.00 / 1 y``: per GPU for the whole term."""
    price = money(g.get("reserved_price_per_gpu"), g.get("currency"))
    hours = g.get("reserved_term_hours")
    if not price or not hours:
        return price
    term = f"{hours / 8760:g} y" if hours % 8760 == 0 else f"{hours:g} h"
    return f"{price} / {term}"


def _verified(v: dict | None) -> str:
    """``2/2 nodes 2026-12-03, TFLOPS >= 81%``: this model's nodes whose latest check passed."""
    if not v:
        return ""
    total = v["passed"] + v["failed"] + v["unmeasured"]
    text = f"{v['passed']}/{total} nodes {(v.get('at') or '')[:10]}"
    if v.get("tflops_ratio") is not None:
        text += f", TFLOPS >= {v['tflops_ratio']:.0%}"
    if v["failed"]:
        text += f", {v['failed']} FAILED"
    return text
