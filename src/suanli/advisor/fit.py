"""Fitting configurations: which GPU models x counts hold a workload, with the
parallelism that implies, ranked by what they cost.

For every catalog GPU the search tries counts 1, 2, 4, 8, then whole 8-GPU nodes, and
for each count the model-parallel layouts tensor-parallel t in {1, 2, 4, 8} (within a
node, t divides the attention heads) x pipeline-parallel p; the remaining factor is data
parallel (over which ZeRO shards). The first count at which some layout fits is that
GPU's answer, using the layout with the least model parallelism (least communication).

Memory must fit the GPU's datasheet capacity in decimal GB (conservative: an '80 GB'
part has 80 GiB). Ranking: inference by the hourly price of one replica; training by the
price of a unit of work (hourly price / (GPUs x dense peak x MFU)), or by the total cost
when the number of training tokens is given.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from suanli.advisor.catalog import GPU, load_catalog
from suanli.advisor.memory import GIB, estimate_inference
from suanli.advisor.models import ModelArch
from suanli.advisor.pricebook import Offer, PriceBook, default_pricebook
from suanli.advisor.timing import training_time
from suanli.advisor.training import estimate_training

INFERENCE_COUNTS = (1, 2, 4, 8, 16, 32, 64)
TRAINING_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
TP_DEGREES = (1, 2, 4, 8)
PP_DEGREES = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True)
class FitOption:
    """One GPU model at the smallest count that fits, with its layout and price."""

    gpu: str
    gpus: int
    tp: int
    pp: int
    dp: int
    parallelism: str
    per_gpu_bytes: float
    gpu_memory_bytes: float
    memory_used_fraction: float
    price_per_gpu_hour: float | None
    price_plan: str | None
    price_source: str | None
    hourly_cost: float | None
    training_hours: float | None = None
    total_cost: float | None = None
    rank: int = 0
    billed_gpus: int | None = None  # GPUs the hourly cost pays for: whole 8-GPU nodes where sold so


def _price(book: PriceBook, gpu: GPU) -> Offer | None:
    """Cheapest hourly-billed offer: a quoted on-demand or monthly rate, else a derived one."""
    best = None
    for plan in ("on_demand", "monthly"):
        offer = book.cheapest(gpu.name, plan)
        if offer and (best is None or (offer.derived, offer.price_per_gpu_hour) < (best.derived, best.price_per_gpu_hour)):
            best = offer
    return best


def _layouts(count: int, heads: int, pp_ok: bool = True):
    for tp in TP_DEGREES:
        if tp > count or count % tp or heads % tp:
            continue
        for pp in PP_DEGREES if pp_ok else (1,):
            if tp * pp > count or count % (tp * pp):
                continue
            if pp > 1 and tp < min(8, count):  # fill a node with TP before pipelining
                continue
            yield tp, pp


def _describe(tp: int, pp: int, dp: int, zero: int | None) -> str:
    parts = [f"TP={tp}"] if tp > 1 else []
    if pp > 1:
        parts.append(f"PP={pp}")
    if dp > 1:
        parts.append(f"DP={dp}" + (f" (ZeRO-{zero})" if zero else ""))
    return " x ".join(parts) or "single GPU"


def fit_inference(
    model: ModelArch,
    precision: str = "bf16",
    context: int = 4096,
    batch: int = 1,
    kv_cache_dtype: str = "bf16",
    gpus: list[GPU] | None = None,
    book: PriceBook | None = None,
) -> list[FitOption]:
    """Smallest serving configuration per GPU model, cheapest replica first."""
    book = book or default_pricebook()
    options = []
    for gpu in gpus or load_catalog():
        for count in INFERENCE_COUNTS:
            found = None
            for tp, pp in sorted(_layouts(count, model.heads), key=lambda layout: (layout[0] * layout[1], layout[1])):
                est = estimate_inference(model, precision, context, batch, kv_cache_dtype, gpus=tp)
                overhead = est.components["runtime_overhead"] / tp
                per_gpu = (est.per_gpu_bytes - overhead) / pp + overhead
                if per_gpu <= gpu.memory_bytes:
                    found = (tp, pp, per_gpu)
                    break
            if found:
                tp, pp, per_gpu = found
                dp = count // (tp * pp)
                if dp > 1:  # more GPUs than the layout needs: not a smallest fit
                    continue
                options.append(_option(gpu, count, tp, pp, 1, None, per_gpu, book))
                break
    return _rank(options, key=lambda o: (o.hourly_cost is None, o.hourly_cost or 0, o.gpus))


def fit_training(
    model: ModelArch,
    method: str = "full",
    *,
    zero: int = 3,
    offload: str = "none",
    optimizer: str = "adamw",
    mode: str = "mixed",
    seq_len: int = 4096,
    micro_batch: int = 1,
    checkpointing: str = "full",
    flash_attention: bool = True,
    lora_rank: int = 16,
    tokens: float | None = None,
    mfu: float | None = None,
    gpus: list[GPU] | None = None,
    book: PriceBook | None = None,
) -> list[FitOption]:
    """Smallest training configuration per GPU model, cheapest work (or run) first."""
    book = book or default_pricebook()
    options = []
    for gpu in gpus or load_catalog():
        if gpu.bf16_tflops < 1:
            continue  # no usable 16-bit tensor rate (P40)
        done = False
        for count in TRAINING_COUNTS:
            for tp, pp in sorted(_layouts(count, model.heads), key=lambda layout: (layout[0] * layout[1], layout[1])):
                # _layouts only yields divisible layouts, so any AdvisorError here is bad
                # input (unknown stage, offload, optimizer...) and must reach the caller.
                est = estimate_training(
                    model,
                    method,
                    gpus=count,
                    zero=zero,
                    offload=offload,
                    optimizer=optimizer,
                    mode=mode,
                    tp=tp,
                    pp=pp,
                    seq_len=seq_len,
                    micro_batch=micro_batch,
                    checkpointing=checkpointing,
                    flash_attention=flash_attention,
                    lora_rank=lora_rank,
                )
                if est.per_gpu_bytes <= gpu.memory_bytes:
                    opt = _option(gpu, count, tp, pp, count // (tp * pp), zero, est.per_gpu_bytes, book)
                    if tokens:
                        t = training_time(model, tokens, gpu, count, mfu, method)
                        total = opt.hourly_cost * t.seconds / 3600 if opt.hourly_cost else None
                        opt = replace(opt, training_hours=t.seconds / 3600, total_cost=total)
                    options.append(opt)
                    done = True
                    break
            if done:
                break

    def work_price(o: FitOption) -> tuple:
        if tokens:
            return (o.total_cost is None, o.total_cost or 0, o.gpus)
        gpu = next(g for g in load_catalog() if g.name == o.gpu)
        rate = o.gpus * gpu.bf16_tflops * (mfu or gpu.default_mfu)
        return (o.hourly_cost is None, (o.hourly_cost or 0) / rate, o.gpus)

    return _rank(options, key=work_price)


def _option(gpu: GPU, count: int, tp: int, pp: int, dp: int, zero: int | None, per_gpu: float, book: PriceBook) -> FitOption:
    offer = _price(book, gpu)
    hourly, billed = None, None
    if offer:  # an 8-GPU bare-metal offer is rented in whole nodes
        billed = -(-count // offer.gpus_per_unit) * offer.gpus_per_unit
        hourly = offer.price_per_gpu_hour * billed
    return FitOption(
        gpu=gpu.name,
        gpus=count,
        tp=tp,
        pp=pp,
        dp=dp,
        parallelism=_describe(tp, pp, dp, zero),
        per_gpu_bytes=per_gpu,
        gpu_memory_bytes=gpu.memory_bytes,
        memory_used_fraction=per_gpu / gpu.memory_bytes,
        price_per_gpu_hour=offer.price_per_gpu_hour if offer else None,
        price_plan=offer.plan if offer else None,
        price_source=offer.source if offer else None,
        hourly_cost=hourly,
        billed_gpus=billed,
    )


def _rank(options: list[FitOption], key) -> list[FitOption]:
    ordered = sorted(options, key=key)
    return [replace(o, rank=i + 1) for i, o in enumerate(ordered)]


__all__ = ["FitOption", "fit_inference", "fit_training", "GIB"]
