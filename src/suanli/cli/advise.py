"""``suanli advise``: memory, fitting configurations, time and cost for a model.

Every subcommand prints Rich tables by default and one JSON object with ``--json``;
bad input (unknown model, precision, GPU, negative numbers) prints one line naming the
value and exits with status 2. ``suanli tco`` and ``suanli plan`` reuse the helpers here.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from suanli.advisor import AdvisorError, service, to_jsonable
from suanli.advisor.catalog import find_gpu
from suanli.advisor.memory import InferenceEstimate, fit_on_gpu
from suanli.advisor.platform import PLAN_NAMES, plan_name
from suanli.advisor.pricebook import PLANS, load_pricebook
from suanli.advisor.timing import DecodeThroughput

GIB = 2**30
F = TypeVar("F", bound=Callable[..., Any])
console = Console()
err_console = Console(stderr=True)

app = typer.Typer(no_args_is_help=True, help="What to rent: memory, fitting GPUs, time and cost for a model.")


# ---- shared helpers (also used by suanli.cli.tco and suanli.cli.plan) -----------------


def friendly_errors(func: F) -> F:
    """Turn AdvisorError into a one-line message and exit status 2, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except AdvisorError as exc:
            err_console.print(f"[bold red]error:[/bold red] {exc}", highlight=False)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def emit_json(obj: Any) -> None:
    """Print a result as JSON on stdout (plain echo: no Rich wrapping)."""
    typer.echo(json.dumps(to_jsonable(obj), ensure_ascii=False, indent=2))


def gb(nbytes: float) -> str:
    """'140.00 GB (130.39 GiB)': both units, because sources mix them."""
    return f"{nbytes / 1e9:,.2f} GB ({nbytes / GIB:,.2f} GiB)"


def money(value: float | None, currency: str = "CNY") -> str:
    return "—" if value is None else f"{value:,.2f} {currency}"


_COUNT = re.compile(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbt]?)\s*", re.IGNORECASE)
_MULT = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def parse_count(text: str, what: str = "count") -> float:
    """'2T' -> 2e12, '300B' -> 3e11, '1e9' -> 1e9 (a bare number is taken as is)."""
    m = _COUNT.fullmatch(text or "")
    if not m:
        raise AdvisorError(f"cannot read {what} {text!r}; write e.g. 2T, 300B or 1e9")
    value = float(m.group(1)) * _MULT[m.group(2).lower()]
    if value <= 0:
        raise AdvisorError(f"{what} must be > 0, got {text!r}")
    return value


def _components_table(title: str, components: dict[str, float], total: float) -> Table:
    table = Table(title=title)
    table.add_column("component")
    table.add_column("memory", justify="right")
    for name, value in components.items():
        table.add_row(name, gb(value))
    table.add_row("[bold]total[/bold]", f"[bold]{gb(total)}[/bold]")
    return table


ModelOpt = typer.Option(None, "--model", "-m", help="Bundled model name (case-insensitive)")
ConfigOpt = typer.Option(None, "--config", help="Path to a Hugging Face config.json")
ParamsOpt = typer.Option(None, "--params", help="Bare parameter count for a rough answer, e.g. 70B")
JsonOpt = typer.Option(False, "--json", help="Print one JSON object for scripts")


# ---- memory ------------------------------------------------------------------------------


@app.command()
@friendly_errors
def memory(
    model: str | None = ModelOpt,
    config: Path | None = ConfigOpt,
    params: str | None = ParamsOpt,
    task: str = typer.Option("inference", help="inference | full-finetune | lora | qlora"),
    precision: str = typer.Option("bf16", help="Weights: bf16, fp16, fp8, int8, int4, gptq-int4, awq, q4_k_m, ..."),
    context: int = typer.Option(4096, help="Tokens per sequence (training: sequence length)"),
    batch: int = typer.Option(1, help="Concurrent sequences (training: micro-batch per GPU)"),
    gpus: int = typer.Option(1, help="GPUs (inference: tensor parallel; training: total)"),
    kv_cache_dtype: str = typer.Option("bf16", help="KV cache dtype: bf16, fp16, fp8"),
    prefill_tokens: int | None = typer.Option(None, help="Largest prefill chunk (default min(context x batch, 8192))"),
    gpu: str | None = typer.Option(
        None, help="Inference: check the fit on this GPU model (--gpus of them) and show the room left"
    ),
    zero: int = typer.Option(0, help="ZeRO stage 0-3 (training)"),
    offload: str = typer.Option("none", help="none | optimizer | all (training, ZeRO)"),
    optimizer: str = typer.Option("adamw", help="adamw | adamw8bit | sgd"),
    mode: str = typer.Option("mixed", help="mixed (FP32 master) | bf16 (pure BF16)"),
    tp: int = typer.Option(1, help="Tensor-parallel degree (training)"),
    pp: int = typer.Option(1, help="Pipeline-parallel degree (training)"),
    checkpointing: str = typer.Option("none", help="Activation checkpointing: none | full"),
    no_flash: bool = typer.Option(False, "--no-flash", help="Attention without FlashAttention"),
    lora_rank: int = typer.Option(16, help="LoRA rank"),
    accounting: str = typer.Option("deepspeed", help="ZeRO accounting: deepspeed | paper"),
    logit_bytes: float = typer.Option(
        28.0,
        help="Bytes per logit per token at the loss (28: measured on ms-swift; >= 12 for unfused FP32 cross-entropy; ~0 fused)",
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Memory with a breakdown per component."""
    est = service.memory(
        model=model,
        config=config,
        params=params,
        task=task,
        precision=precision,
        context=context,
        batch=batch,
        gpus=gpus,
        kv_cache_dtype=kv_cache_dtype,
        prefill_tokens=prefill_tokens,
        **(
            {}
            if service.task_method(task) == "inference"
            else dict(
                zero=zero,
                offload=offload,
                optimizer=optimizer,
                mode=mode,
                tp=tp,
                pp=pp,
                checkpointing=checkpointing,
                flash_attention=not no_flash,
                lora_rank=lora_rank,
                accounting=accounting,
                logit_bytes=logit_bytes,
            )
        ),
    )
    on_gpu = None
    if gpu and isinstance(est, InferenceEstimate):
        hw = find_gpu(gpu)
        on_gpu = fit_on_gpu(
            service.model_of(model, config, params), precision, hw.name, hw.memory_bytes, gpus, context, batch, kv_cache_dtype
        )
    if json_out:
        return emit_json(est if on_gpu is None else {**to_jsonable(est), "on_gpu": on_gpu})
    if isinstance(est, InferenceEstimate):
        console.print(
            _components_table(
                f"{est.model} inference, {est.precision}, {context} tokens x {batch}, {gpus} GPU(s)",
                est.components,
                est.total_bytes,
            )
        )
        console.print(f"per GPU: {gb(est.per_gpu_bytes)}; KV cache {est.kv_bytes_per_token:,.0f} B/token")
        if on_gpu is not None:
            verdict = "[green]fits[/green]" if on_gpu.fits else "[red]does not fit[/red]"
            console.print(
                f"{gpus} x {on_gpu.gpu} ({on_gpu.gpu_memory_bytes / 1e9:g} GB each): {verdict}; "
                f"room for {on_gpu.max_batch:,} sequence(s) of {context:,} tokens, or one batch "
                f"of {batch} at up to {on_gpu.max_context:,} tokens"
            )
    else:
        console.print(
            _components_table(
                f"{est.model} {est.method}, {gpus} GPU(s), ZeRO-{est.zero}, seq {context} x {batch}: per GPU",
                est.components,
                est.per_gpu_bytes,
            )
        )
        if est.host_bytes_per_node:
            console.print(f"host memory per node for offload: {gb(est.host_bytes_per_node)}")
    for note in est.notes:
        console.print(f"[dim]note: {note}[/dim]")
    return None


# ---- fit ---------------------------------------------------------------------------------


@app.command()
@friendly_errors
def fit(
    model: str | None = ModelOpt,
    config: Path | None = ConfigOpt,
    params: str | None = ParamsOpt,
    task: str = typer.Option("inference", help="inference | full-finetune | lora | qlora"),
    precision: str = typer.Option("bf16", help="Weights precision (inference)"),
    context: int = typer.Option(4096, help="Tokens per sequence (training: sequence length)"),
    batch: int = typer.Option(1, help="Concurrent sequences (training: micro-batch per GPU)"),
    zero: int = typer.Option(3, help="ZeRO stage for training"),
    offload: str = typer.Option("none", help="none | optimizer | all"),
    checkpointing: str = typer.Option("full", help="Activation checkpointing: none | full"),
    tokens: str | None = typer.Option(None, help="Training tokens (e.g. 2T) to rank by total cost"),
    mfu: float | None = typer.Option(None, help="Override the default MFU per GPU class"),
    top: int = typer.Option(12, help="Rows to show"),
    pricebook: Path | None = typer.Option(None, help="Market price book YAML (default: the seed articles' prices)"),
    plan: str = typer.Option("on-demand", help="This platform's plan to price: on-demand | spot | monthly | reserved"),
    here: bool | None = typer.Option(
        None,
        "--platform/--no-platform",
        help="Ask the server you logged in to what it can rent and at what price [default: when logged in]",
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Which GPU models x counts fit: on this platform (its price book, its nodes) and
    across the catalog at market reference prices."""
    book = load_pricebook(pricebook)
    training = (
        {} if service.task_method(task) == "inference" else dict(zero=zero, offload=offload, checkpointing=checkpointing, mfu=mfu)
    )
    n_tokens = parse_count(tokens, "tokens") if tokens else None
    options = service.fit(
        model=model,
        config=config,
        params=params,
        task=task,
        precision=precision,
        context=context,
        batch=batch,
        tokens=n_tokens,
        book=book,
        **training,
    )
    name = service.model_of(model, config, params).name
    query: dict[str, Any] = {
        "model": model,
        "params": params,
        "task": task,
        "precision": precision,
        "context": context,
        "batch": batch,
    }
    query |= {"tokens": n_tokens, "plan": plan_name(plan), "training": {k: v for k, v in training.items() if v is not None}}
    platform, note = platform_answers({k: v for k, v in query.items() if v is not None}, here, config is not None)
    ranking = service.market_ranking(task, n_tokens)
    if json_out:
        return emit_json(
            {
                "model": name,
                "task": task,
                "platform": platform,
                "platform_note": note,
                "options": options,
                "options_are": f"market reference prices ({MARKET}), not this platform's",
                "options_ranked_by": ranking,
            }
        )
    if platform is not None:
        print_platform(name, task, platform)
    elif note:
        console.print(f"[dim]this platform: {note}[/dim]")
    table = Table(title=f"{name} {task}: every catalog GPU at market reference prices ({MARKET}), by {ranking}")
    for col in ("#", "GPU", "GPUs", "parallelism", "per GPU", "used", "price/GPU-h", "plan", "per hour"):
        table.add_column(col, justify="right" if col not in ("GPU", "parallelism", "plan") else "left")
    if tokens:
        table.add_column("hours", justify="right")
        table.add_column("total", justify="right")
    for o in options[:top]:
        row = [
            str(o.rank),
            o.gpu,
            str(o.gpus),
            o.parallelism,
            f"{o.per_gpu_bytes / 1e9:,.1f} GB",
            f"{o.memory_used_fraction:.0%}",
            money(o.price_per_gpu_hour, book.currency),
            plan_name(o.price_plan) if o.price_plan else "—",
            money(o.hourly_cost, book.currency) + _billed_note(o.gpus, o.billed_gpus),
        ]
        if tokens:
            row += [f"{o.training_hours:,.1f}" if o.training_hours else "—", money(o.total_cost, book.currency)]
        table.add_row(*row)
    console.print(table)
    if not options:
        console.print("nothing in the catalog fits; try a lower precision, ZeRO-3 or offload")


MARKET = "the seed articles' providers"


def _billed_note(gpus: int, billed: int | None) -> str:
    """Why 2 GPUs cost what 8 do: the offer is a bare-metal node rented whole."""
    return f" ({billed} GPUs billed: whole nodes)" if billed and billed != gpus else ""


def _book_plan(plan: str) -> str:
    """A plan as the flags take it (``on-demand``) to the market book's key (``on_demand``)."""
    return plan_name(plan).replace("-", "_")


def platform_answers(query: dict[str, Any], want: bool | None, has_config: bool) -> tuple[dict[str, Any] | None, str]:
    """This platform's answer to ``query`` (``POST /v1/advise/platform``) and, when there
    is none, why. Asked when ``want`` is True, or by default when a token is configured;
    a server that does not answer is an error only when it was asked for by name."""
    from suanli.cli import remote
    from suanli.client import ApiError, load_settings

    if want is False:
        return None, "not asked (--no-platform)"
    if has_config:
        return None, "a local config.json is not sent to the server; give --model or --params"
    if want is None and not load_settings().token:
        return None, "not logged in (suanli login): market reference prices only"
    try:
        return remote.client().request("POST", "/v1/advise/platform", json=query), ""
    except ApiError as exc:
        if want:
            raise AdvisorError(f"this platform did not answer ({exc.code}): {exc.message}") from None
        return None, f"the server did not answer ({exc.code}): {exc.message}"


def print_platform(name: str, task: str, platform: dict[str, Any]) -> None:
    """The platform's answers as a table whose title says the plan and the order."""
    by = "total cost of the run" if platform["sorted_by"] == "total_cost" else "price per hour"
    table = Table(title=f"{name} {task} on this platform ({platform['plan']}, its price book), cheapest first by {by}")
    cols = ("#", "GPU", "GPUs", "nodes", "parallelism", "used", "plan", "price/GPU-h", "per hour", "free now")
    for col in cols:
        table.add_column(col, justify="left" if col in ("GPU", "parallelism", "plan", "free now") else "right")
    with_total = platform["sorted_by"] == "total_cost"
    if with_total:
        table.add_column("hours", justify="right")
        table.add_column("total", justify="right")
    for a in platform["answers"]:
        row = [
            str(a["rank"]),
            a["model"],
            str(a["gpus"]),
            str(a["nodes"]),
            a["parallelism"],
            f"{a['memory_used_fraction']:.0%}",
            a["plan"],
            money(a["price_per_gpu_hour"], a["currency"]),
            money(a["price_per_hour"], a["currency"]),
            f"yes ({a['free']} of {a['total']} free)" if a["free_now"] else f"no ({a['free']} of {a['total']} free)",
        ]
        if with_total:
            row += [f"{a['training_hours']:,.1f}", money(a["total_cost"], a["currency"])]
        table.add_row(*row)
    console.print(table)
    if not platform["answers"]:
        console.print("no GPU on this platform can hold it (or its nodes are too few for the GPUs it needs)")


# ---- time --------------------------------------------------------------------------------


@app.command()
@friendly_errors
def time(
    model: str | None = ModelOpt,
    config: Path | None = ConfigOpt,
    params: str | None = ParamsOpt,
    gpu: str = typer.Option("H100", help="GPU model"),
    gpus: int = typer.Option(1, help="Number of GPUs"),
    task: str = typer.Option("full-finetune", help="inference | full-finetune | lora | qlora"),
    tokens: str | None = typer.Option(None, help="Training tokens, e.g. 2T (training tasks)"),
    mfu: float | None = typer.Option(None, help="Model FLOPs utilisation (default per GPU class)"),
    precision: str = typer.Option("bf16", help="Weights precision (inference)"),
    context: int = typer.Option(4096, help="Context tokens read per decode step (inference)"),
    batch: int = typer.Option(1, help="Concurrent sequences (inference)"),
    mbu: float | None = typer.Option(None, help="Memory-bandwidth utilisation (inference)"),
    json_out: bool = JsonOpt,
) -> None:
    """Training time from 6·N·D, or the decode throughput bound from memory bandwidth."""
    res = service.time(
        model=model,
        config=config,
        params=params,
        gpu=gpu,
        gpus=gpus,
        task=task,
        tokens=parse_count(tokens, "tokens") if tokens else None,
        mfu=mfu,
        precision=precision,
        context=context,
        batch=batch,
        mbu=mbu,
    )
    if json_out:
        return emit_json(res)
    if isinstance(res, DecodeThroughput):
        console.print(
            f"{res.model} on {gpus} x {res.gpu}, {res.precision}, batch {batch}, "
            f"context {context}: ≤ {res.tokens_per_second_per_sequence:,.1f} tokens/s per "
            f"sequence, {res.tokens_per_second_total:,.1f} tokens/s total (MBU {res.mbu:.2f}); "
            f"prefill of {context} tokens ≈ {res.prefill_seconds:,.2f} s"
        )
        return None
    console.print(
        f"{res.model} {task} on {gpus} x {res.gpu}: {res.flops:.3g} FLOPs at MFU "
        f"{res.mfu:.2f} → {res.days:,.2f} days, {res.gpu_hours:,.0f} GPU-hours"
    )
    console.print(f"[dim]MFU: {res.mfu_source}[/dim]")
    for note in res.notes:
        console.print(f"[dim]note: {note}[/dim]")
    return None


# ---- cost --------------------------------------------------------------------------------


@app.command()
@friendly_errors
def cost(
    gpu: str | None = typer.Option(None, help="GPU model, e.g. H100 (or give --model)"),
    gpus: int = typer.Option(1, help="Number of GPUs"),
    hours: float | None = typer.Option(None, help="Hours of work (serving hours for inference)"),
    plan: list[str] = typer.Option(list(PLAN_NAMES), help="Plans to price (repeat the option)"),
    model: str | None = ModelOpt,
    config: Path | None = ConfigOpt,
    params: str | None = ParamsOpt,
    task: str = typer.Option("inference", help="With --model: inference | full-finetune | lora | qlora"),
    tokens: str | None = typer.Option(None, help="With --model and a training task: tokens, e.g. 100B"),
    precision: str = typer.Option("bf16", help="With --model: weights precision (inference)"),
    context: int = typer.Option(4096, help="With --model: tokens per sequence"),
    zero: int = typer.Option(3, help="With --model: ZeRO stage for training"),
    top: int = typer.Option(8, help="With --model: configurations to price"),
    pricebook: Path | None = typer.Option(None, help="Price book YAML (default: seed prices)"),
    json_out: bool = JsonOpt,
) -> None:
    """Cost across offers and plans (on-demand, monthly, reserved, spot), for GPUs x hours
    or, with --model, for each fitting configuration."""
    book = load_pricebook(pricebook)
    if model or config or params:
        training = {} if service.task_method(task) == "inference" else {"zero": zero}
        rows = service.config_costs(
            model=model,
            config=config,
            params=params,
            task=task,
            hours=hours,
            tokens=parse_count(tokens, "tokens") if tokens else None,
            top=top,
            book=book,
            precision=precision,
            context=context,
            **training,
        )
        if json_out:
            return emit_json({"currency": book.currency, "configurations": rows})
        table = Table(title=f"cost per fitting configuration ({book.currency})")
        for col in ("#", "configuration", "hours", *map(plan_name, PLANS)):
            table.add_column(col, justify="left" if col == "configuration" else "right")
        for row in rows:
            o, best = row["option"], row["best_per_plan"]
            table.add_row(
                str(o.rank),
                f"{o.gpus} x {o.gpu} ({o.parallelism})",
                f"{row['hours']:,.1f}",
                *[money(best[p].total, "") if p in best else "—" for p in PLANS],
            )
        console.print(table)
        return None
    if gpu is None or hours is None:
        raise AdvisorError("give --gpu and --hours, or --model (with --tokens or --hours)")
    result = service.cost(gpu=gpu, gpus=gpus, hours=hours, plans=tuple(_book_plan(p) for p in plan), book=book)
    if json_out:
        return emit_json(result)
    table = Table(title=f"{gpus} x {result['gpu']} for {hours:g} h")
    for col in ("provider", "plan", "price/GPU-h", "billed GPU-h", "total", "note"):
        table.add_column(col, justify="right" if col in ("price/GPU-h", "billed GPU-h", "total") else "left")
    for line in result["options"]:
        tag = " (derived)" if line.derived else ""
        table.add_row(
            line.provider,
            plan_name(line.plan) + tag,
            money(line.rate_per_gpu_hour, line.currency),
            f"{line.billed_gpu_hours:,.0f}",
            money(line.total, line.currency),
            line.note,
        )
    console.print(table)
    console.print("[dim]sources: --json lists where each price comes from; derived prices follow seed 004's plan rules[/dim]")
    if not result["options"]:
        console.print("no offers for this GPU in the price book")
    return None
