"""One entry point per advisor question, taking JSON-friendly keyword arguments.

The CLI (``suanli advise``, ``suanli tco``, ``suanli plan``) and the API
(``/v1/advise/...``) both call these, so a request means the same thing on either side:
names are resolved here (model by name, config.json path or parameter count; task names
such as ``full-finetune``), the right estimator is chosen, and a dataclass comes back that
``suanli.advisor.to_jsonable`` turns into JSON. Bad input raises ``AdvisorError``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from suanli.advisor.catalog import find_gpu
from suanli.advisor.cost import best_per_plan, cost_options
from suanli.advisor.errors import AdvisorError
from suanli.advisor.fit import FitOption, fit_inference, fit_training
from suanli.advisor.memory import InferenceEstimate, estimate_inference
from suanli.advisor.models import ModelArch, resolve_model
from suanli.advisor.platform import PlatformGpu, on_platform, plan_name, sorted_by
from suanli.advisor.pricebook import PLANS, PriceBook, load_pricebook
from suanli.advisor.tco import TCOAssumptions, TCOResult, compute_tco
from suanli.advisor.timing import DecodeThroughput, TrainingTime, decode_throughput, training_time
from suanli.advisor.training import TrainingEstimate, estimate_training

#: Task names accepted from users -> estimator method.
TASKS = {"inference": "inference", "full-finetune": "full", "full": "full", "pretrain": "full", "lora": "lora", "qlora": "qlora"}


def task_method(task: str) -> str:
    """'full-finetune' -> 'full'; raises for unknown names."""
    key = str(task).strip().lower()
    if key not in TASKS:
        raise AdvisorError(f"unknown task {task!r}; choose one of: {', '.join(TASKS)}")
    return TASKS[key]


def model_of(model: str | None = None, config: str | Path | None = None, params: str | float | None = None) -> ModelArch:
    """Exactly one of a bundled model name, a config.json path or a parameter count."""
    return resolve_model(name=model, config=config, params=params)


def memory(
    *,
    model: str | None = None,
    config: str | Path | None = None,
    params: str | float | None = None,
    task: str = "inference",
    precision: str = "bf16",
    context: int = 4096,
    batch: int = 1,
    gpus: int = 1,
    kv_cache_dtype: str = "bf16",
    prefill_tokens: int | None = None,
    **training: Any,
) -> InferenceEstimate | TrainingEstimate:
    """Memory for inference (``context`` tokens x ``batch`` sequences on ``gpus`` TP GPUs)
    or training (``context`` = sequence length, ``batch`` = micro-batch, ``gpus`` total;
    extra keywords go to ``estimate_training``: zero, offload, optimizer, mode, tp, pp,
    checkpointing, flash_attention, lora_rank, lora_targets, accounting)."""
    arch = model_of(model, config, params)
    method = task_method(task)
    if method == "inference":
        return estimate_inference(arch, precision, context, batch, kv_cache_dtype, gpus, prefill_tokens)
    return estimate_training(arch, method, gpus=gpus, seq_len=context, micro_batch=batch, **training)


def fit(
    *,
    model: str | None = None,
    config: str | Path | None = None,
    params: str | float | None = None,
    task: str = "inference",
    precision: str = "bf16",
    context: int = 4096,
    batch: int = 1,
    tokens: float | None = None,
    book: PriceBook | None = None,
    **training: Any,
) -> list[FitOption]:
    """Smallest fitting configuration per catalog GPU, ranked (see ``fit.py``)."""
    arch = model_of(model, config, params)
    method = task_method(task)
    book = book or load_pricebook()
    if method == "inference":
        return fit_inference(arch, precision, context, batch, book=book)
    return fit_training(arch, method, seq_len=context, micro_batch=batch, tokens=tokens, book=book, **training)


def platform(*, here: list[PlatformGpu], plan: str = "on-demand", **fit_args: Any) -> dict[str, Any]:
    """The fitting configurations this platform can run, priced from its own book on
    ``plan`` (``here``: its GPUs, read by the caller from billing and the nodes), and
    what they are sorted by. ``fit_args`` are ``fit``'s."""
    options = fit(**fit_args)
    return {"plan": plan_name(plan), "sorted_by": sorted_by(options), "answers": on_platform(options, here, plan)}


def market_ranking(task: str, tokens: float | None = None) -> str:
    """What the catalog search (``fit``) ranks by, in words a column header can say."""
    if task_method(task) == "inference":
        return "price per hour of one replica"
    if tokens:
        return "total cost of the run"
    return "price per unit of work (price per hour / (GPUs x dense BF16 TFLOPS x MFU))"


def time(
    *,
    model: str | None = None,
    config: str | Path | None = None,
    params: str | float | None = None,
    gpu: str = "H100",
    gpus: int = 1,
    task: str = "full-finetune",
    tokens: float | None = None,
    mfu: float | None = None,
    precision: str = "bf16",
    context: int = 4096,
    batch: int = 1,
    mbu: float | None = None,
) -> TrainingTime | DecodeThroughput:
    """Training time (needs ``tokens``) or, for ``task='inference'``, the decode bound."""
    arch = model_of(model, config, params)
    hw = find_gpu(gpu)
    method = task_method(task)
    if method == "inference":
        return decode_throughput(arch, hw, precision, gpus, batch, context, mbu)
    if not tokens:
        raise AdvisorError("tokens is required for training time (e.g. --tokens 2T)")
    return training_time(arch, float(tokens), hw, gpus, mfu, method)


def cost(
    *, gpu: str, gpus: int = 1, hours: float, plans: tuple[str, ...] | list[str] = PLANS, book: PriceBook | None = None
) -> dict[str, Any]:
    """Every offer for ``gpus`` x ``gpu`` over ``hours``, cheapest first, and the best per plan."""
    book = book or load_pricebook()
    lines = cost_options(book, gpu, gpus, hours, tuple(plans))
    return {
        "gpu": find_gpu(gpu).name,
        "gpus": gpus,
        "hours": hours,
        "currency": book.currency,
        "options": lines,
        "best_per_plan": best_per_plan(lines),
    }


def tco(*, book: PriceBook | None = None, **assumptions: Any) -> TCOResult:
    """Rent versus build; keywords are ``TCOAssumptions`` fields (defaults: seed 003)."""
    unknown = set(assumptions) - set(TCOAssumptions.__dataclass_fields__)
    if unknown:
        raise AdvisorError(f"unknown TCO assumption(s): {', '.join(sorted(unknown))}")
    return compute_tco(TCOAssumptions(**assumptions), book)


def config_costs(
    *,
    model: str | None = None,
    config: str | Path | None = None,
    params: str | float | None = None,
    task: str = "inference",
    hours: float | None = None,
    tokens: float | None = None,
    top: int = 8,
    book: PriceBook | None = None,
    **fit_args: Any,
) -> list[dict[str, Any]]:
    """Price the ``top`` fitting configurations across every plan: for training the hours
    come from each configuration's own training time (``tokens``), for inference from
    ``hours`` of serving. Returns, per configuration, the option and its best line per plan."""
    book = book or load_pricebook()
    method = task_method(task)
    if method != "inference" and not tokens and not hours:
        raise AdvisorError("give tokens (training) or hours to price configurations")
    if method == "inference" and not hours:
        raise AdvisorError("give hours of serving to price inference configurations")
    options = fit(model=model, config=config, params=params, task=task, tokens=tokens, book=book, **fit_args)
    out: list[dict[str, Any]] = []
    for opt in options:
        run_hours = opt.training_hours if (tokens and opt.training_hours) else hours
        lines = cost_options(book, opt.gpu, opt.gpus, run_hours) if run_hours else []
        if lines:  # GPUs without any offer in the book cannot be priced
            out.append({"option": opt, "hours": run_hours, "best_per_plan": best_per_plan(lines)})
        if len(out) == top:
            break
    return out
