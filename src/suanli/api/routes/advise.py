"""Advisor API: thin JSON wrappers over ``suanli.advisor.service`` (memory, fit, TCO).

``/fit`` answers for every catalog GPU at the seed articles' market prices (a
reference); ``/platform`` answers for this platform: its own price book (the offers
``suanli gpus`` shows) and the configurations its nodes can hold.

The request bodies mirror the service keywords; a model comes by bundled name or
parameter count (a server never reads a ``config.json`` path a client names).
Advisor errors are 422 with the advisor's message, which names the bad value.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from suanli.advisor import AdvisorError, service, to_jsonable
from suanli.api.context import ServerContext
from suanli.api.deps import context, principal
from suanli.bounds import Finite, Text
from suanli.control import nodes
from suanli.control.auth import Principal
from suanli.control.platform_gpus import platform_gpus
from suanli.errors import Invalid

router = APIRouter(prefix="/v1/advise", tags=["advisor"])

#: a model's context (tokens) and a cluster's GPUs an answer may be asked for: far above
#: any real one, low enough that the arithmetic stays quick
MAX_CONTEXT = 100_000_000
MAX_GPUS_ADVISED = 1_000_000


class ModelQuery(BaseModel):
    """A model and how it is run: what every memory-based question starts from."""

    model_config = ConfigDict(extra="forbid")

    model: Text | None = Field(default=None, max_length=100, description="bundled model name, e.g. qwen2.5-72b")
    params: Annotated[Text, Field(max_length=30)] | Annotated[Finite, Field(gt=0, le=1e15)] | None = Field(
        default=None, description="or a parameter count, e.g. 70B"
    )
    task: Text = Field(default="inference", max_length=30)
    precision: Text = Field(default="bf16", max_length=30)
    context: int = Field(default=4096, ge=1, le=MAX_CONTEXT)
    batch: int = Field(default=1, ge=1, le=1_000_000)
    training: dict[str, Any] = Field(default_factory=dict, description="zero, offload, optimizer, checkpointing, lora_rank, ...")


class MemoryQuery(ModelQuery):
    gpus: int = Field(default=1, ge=1, le=MAX_GPUS_ADVISED)
    kv_cache_dtype: Text = Field(default="bf16", max_length=30)
    prefill_tokens: int | None = Field(default=None, ge=1, le=MAX_CONTEXT)


class FitQuery(ModelQuery):
    tokens: Finite | None = Field(default=None, gt=0, le=1e16, description="training tokens, for time and total cost")


class PlatformQuery(FitQuery):
    plan: Text = Field(
        default="on-demand", max_length=30, description="on-demand | spot | monthly | reserved: the plan each price is on"
    )


class TcoQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpus: int | None = Field(default=None, ge=1, le=MAX_GPUS_ADVISED)
    gpu_model: Text | None = Field(default=None, max_length=100)
    gpu_price: Finite | None = Field(default=None, gt=0, le=1e9)
    depreciation_years: Finite | None = Field(default=None, gt=0, le=100)
    residual_fraction: Finite | None = Field(default=None, ge=0, le=1)
    utilization: Finite | None = Field(default=None, gt=0, le=1)
    rent_per_gpu_hour: Finite | None = Field(default=None, gt=0, le=1e6)


def _answer(call: Any) -> Any:
    try:
        return to_jsonable(call())
    except (AdvisorError, TypeError) as exc:
        raise Invalid(str(exc)) from None


@router.post("/memory")
def memory(q: MemoryQuery, who: Principal = Depends(principal)) -> Any:
    """GPU memory for inference or training of a model."""
    args = q.model_dump(exclude={"training"}, exclude_none=True)
    return _answer(lambda: service.memory(**args, **q.training))


@router.post("/fit")
def fit(q: FitQuery, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> Any:
    """The smallest configuration of each catalog GPU that holds the model, ranked by cost,
    each with what this platform has of that GPU now (``here``: null when not offered)."""
    args = q.model_dump(exclude={"training"}, exclude_none=True)
    options = _answer(lambda: service.fit(**args, **q.training))
    here = {s.catalog.name: s for s in nodes.gpu_summary(ctx.db) if s.catalog is not None}
    for o in options:
        s = here.get(o["gpu"])
        o["here"] = None if s is None else {"model": s.model, "total": s.total, "free": s.free, "virtual": s.virtual}
    return options


@router.post("/platform")
def platform(q: PlatformQuery, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> Any:
    """The fitting configurations this platform can rent, priced from its price book on
    ``plan`` (``price_per_hour`` = GPUs x the on-demand price ``/v1/gpus`` shows), with
    the nodes they take and whether their GPUs are free now; cheapest first (``sorted_by``)."""
    args = q.model_dump(exclude={"training", "plan"}, exclude_none=True)
    here = platform_gpus(ctx.db)
    return _answer(lambda: service.platform(here=here, plan=q.plan, **args, **q.training))


@router.post("/tco")
def tco(q: TcoQuery, who: Principal = Depends(principal)) -> Any:
    """Rent versus build (assumptions default to the seed-003 figures)."""
    return _answer(lambda: service.tco(**q.model_dump(exclude_none=True)))
