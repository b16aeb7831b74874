"""Shared plumbing of the commands that talk to a server: the client, JSON or
Rich-table output, and API errors as a one-line message with exit code 1.

Tests swap ``client_factory`` for one bound to the in-process ASGI app.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from suanli.client import ApiError, SuanliClient

console = Console()
err_console = Console(stderr=True)

#: Replaced in tests; returns the client every command uses.
client_factory: Callable[[], SuanliClient] = SuanliClient.from_settings


def client() -> SuanliClient:
    return client_factory()


@contextmanager
def api_errors() -> Iterator[None]:
    try:
        yield
    except ApiError as exc:
        err_console.print(f"[red]error[/red] ({exc.code}): {exc.message}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    t = Table(title=title)
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    # piped output (scripts, tests) gets the full table rather than an 80-column squeeze
    (console if console.is_terminal else Console(width=200)).print(t)


def gpu_desc(obj: dict) -> str:
    """``H100 x 2``; work that named no model shows the model it landed on once placed."""
    landed = sorted({a["gpu_model"] for a in obj.get("allocations") or [] if a.get("gpu_model")})
    model = obj.get("gpu_model") or ("/".join(landed) if landed else "any")
    if obj.get("gpu_milli"):
        return f"{model} x {obj['gpu_milli'] / 1000:g}"
    if obj.get("gpu_count"):
        return f"{model} x {obj['gpu_count']}"
    return "-"


def priority_desc(obj: dict) -> str:
    """``spot``, or ``spot <= 1.20`` with a bid (per GPU-hour)."""
    bid = obj.get("max_price")
    return f"{obj.get('priority', '')} <= {bid}/GPU-h" if bid else str(obj.get("priority", ""))


def waiting_desc(obj: dict) -> str:
    """``capacity: memory``: why a waiting row waits (its ``waiting`` code and detail); "" otherwise."""
    w = obj.get("waiting")
    return f"{w['code']}: {w['detail']}" if w else ""


def placed_on(obj: dict) -> str:
    return ", ".join(f"{a['node']}[{','.join(map(str, a['gpu_indices']))}]" for a in obj.get("allocations", []))


SYMBOLS = {"CNY": "¥", "USD": "$", "EUR": "€"}


def money(value: float | None, currency: str | None, places: int = 2) -> str:
    """``¥19.07`` for display; amounts under one cent keep 4 places (``¥0.0033``) so a
    few seconds' cost does not read as nothing; "" for a null price."""
    if value is None:
        return ""
    if places == 2 and 0 < abs(value) < 0.01:
        places = 4
    sym = SYMBOLS.get(currency or "")
    text = f"{abs(value):,.{places}f}"
    return f"{'-' if value < 0 else ''}{sym or ''}{text}{'' if sym or not currency else ' ' + currency}"


def cost_so_far(obj: dict) -> str:
    """A workload's cost so far (``cost.so_far``), "" where the server gives none."""
    c = obj.get("cost")
    return money(c["so_far"], c["currency"]) if c else ""


def cost_rate(obj: dict) -> str:
    """A workload's rate now: ``¥1.96/h``."""
    c = obj.get("cost")
    return f"{money(c['per_hour'], c['currency'])}/h" if c else ""


def metrics_line(obj: dict) -> str | None:
    """One line for a detail view: its latest usage sample; GPU figures say "not measured"
    rather than a number where none was measured (virtual GPUs)."""
    m = obj.get("metrics") or {}
    if m.get("ts") is None:
        return "usage: no sample yet" if obj.get("state") == "running" else None
    age = max(0.0, time.time() - float(m["ts"]))
    parts = [f"CPU {m['cpu_percent']:.1f}% of a core", f"memory {m['memory_mib']:.0f} MiB"]
    if m.get("gpu_util_percent") is not None:
        parts.append(f"GPU {m['gpu_util_percent']:.0f}%")
        if m.get("gpu_memory_mib") is not None:
            parts.append(f"GPU memory {m['gpu_memory_mib']:.0f} MiB")
        if m.get("power_w") is not None:
            parts.append(f"power {m['power_w']:.0f} W")
    elif m.get("gpu_note"):
        parts.append(f"GPU {m['gpu_note']}")
    if m.get("sessions") is not None:
        parts.append(f"{m['sessions']} open session(s)")
    return f"usage: {', '.join(parts)} ({age:.0f} s ago)"


def metrics_table(kind: str, workload_id: int, since: str, as_json: bool) -> None:
    """``suanli instances metrics`` / ``jobs metrics``: the usage history since a duration ago."""
    from suanli.bounds import parse_duration

    try:
        back = parse_duration(since)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--since") from None
    with api_errors():
        rows = client().metrics_history(kind, workload_id, time.time() - back)
    if as_json:
        return print_json(rows)

    def num(v: float | None, fmt: str = "{:.1f}") -> str:
        return "-" if v is None else fmt.format(v)

    table(
        f"Usage of {kind[:-1]} {workload_id} (last {since})",
        ["TIME (UTC)", "RES", "CPU %", "MEM MiB", "GPU %", "GPU MiB", "POWER W", "SESSIONS"],
        [
            [
                time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(m["ts"])),
                "5 min" if m["resolution_s"] else "sample",
                num(m["cpu_percent"]),
                num(m["memory_mib"], "{:.0f}"),
                num(m["gpu_util_percent"], "{:.0f}") if m["gpu_util_percent"] is not None else (m["gpu_note"] or "-"),
                num(m["gpu_memory_mib"], "{:.0f}"),
                num(m["power_w"], "{:.0f}"),
                "-" if m["sessions"] is None else m["sessions"],
            ]
            for m in rows
        ],
    )


def cost_line(obj: dict) -> str | None:
    """One line for a detail view: what it has cost and what the rate covers."""
    c = obj.get("cost")
    if not c:
        return None
    cur = c["currency"]
    parts = [f"GPUs {money(c['gpu_per_hour'], cur)}/h"]
    if c.get("storage_per_hour"):
        parts.append(f"disk {money(c['storage_per_hour'], cur)}/h")
    return (
        f"cost:  {money(c['so_far'], cur)} so far ({money(c['rated'], cur)} rated + "
        f"{money(c['accruing'], cur)} accruing); now {money(c['per_hour'], cur)}/h ({', '.join(parts)})"
    )
