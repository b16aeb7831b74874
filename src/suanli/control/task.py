"""The task YAML format of ``suanli launch`` (in the spirit of SkyPilot's).

    name: train-gpt
    image: python               # one of `suanli images list` (default: the platform's default image)
    resources:
      accelerators: H100:8      # MODEL[:COUNT], model case-insensitive
      # gpu_milli: 500          # or a fraction of one GPU instead
      cpus: 16                  # cores per node (default: 2 per GPU)
      memory: 64                # GiB per node (default: 8 per GPU)
      priority: on-demand       # on-demand | spot | reserved
      # max_price: "1.20"       # spot only: most you pay per GPU-hour (book's currency)
    num_nodes: 1
    workdir: .                  # your code: `suanli launch` uploads this local directory
                                # (relative to the YAML; skips .git, __pycache__, .venv and
                                # the globs in its .suanliignore) and the job runs in a copy
                                # of it, /workspace/code in its container
    setup: pip install -r requirements.txt
    run: torchrun --nnodes=$NNODES --nproc-per-node=$NPROC_PER_NODE --node-rank=$NODE_RANK --master-addr=$MASTER_ADDR --master-port=$MASTER_PORT train.py
                                # once per node (docs/control-plane.md: the launch convention)
    envs: {EPOCHS: 3}
    secrets: {HF_TOKEN: hf_...} # like envs, but sealed at rest and masked in every listing
    checkpoint_dir: ckpt        # in the job's volume: relative, or under /workspace
    # distributed: torch        # or: the platform runs torchrun, and `run` is one worker's command
    depends_on: [prep]          # jobs it waits for: names in the same pipeline, or ids of
                                # this tenant's jobs
    after: succeeded            # succeeded (default: cancelled if one fails) | finished
    matrix: {lr: [1e-4, 3e-4]}  # a sweep: one job per combination, values in its envs

A pipeline file has ``jobs:`` (a list of tasks, each with a ``name``) and an optional
``name``; it is submitted as a whole or not at all (``control.pipelines``).

Over the API a task carries ``code: <upload id>`` (``POST /v1/uploads``) and no
``workdir``: the server refuses a ``workdir``, which would name a path on its own machine.
Validation errors name the field path (``resources.accelerators``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator, model_validator

from suanli.billing.money import MoneyError, parse_max_price
from suanli.bounds import DB_INT_MAX, MAX_GPUS, Cpus, MemoryGib, Text
from suanli.control.secret_names import check_names
from suanli.control.volume_paths import volume_path
from suanli.errors import Invalid

#: MODEL[:COUNT]; a model may have inner spaces, so the catalog's own names ("A100 80GB
#: SXM4:2") are accepted like the nodes' ("A100-80G:2") and the short ones ("a100:2").
ACCEL = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._ -]*[A-Za-z0-9._-])?)\s*(?::\s*(\d+)\s*)?$")


@dataclass(frozen=True)
class Accelerators:
    model: str
    count: int


def parse_accelerators(value: str) -> Accelerators:
    m = ACCEL.match(value)
    if not m:
        raise ValueError(f"expected MODEL or MODEL:COUNT (e.g. H100:8), got {value!r}")
    count = int(m.group(2)) if m.group(2) is not None else 1
    if not 1 <= count <= MAX_GPUS:
        raise ValueError(f"the GPU count must be 1..{MAX_GPUS} (GPUs per node; more nodes: num_nodes)")
    return Accelerators(m.group(1), count)


def check_max_price(value: object, priority: str) -> str | None:
    """A request's spot bid: canonical decimal text, or ValueError (pydantic names the
    field). Only spot work may carry one."""
    if value is None:
        return None
    try:
        text = parse_max_price(value)
    except MoneyError as exc:
        raise ValueError(str(exc)) from None
    if priority != "spot":
        raise ValueError(
            f"a max_price is a spot bid: only valid with priority spot (this request is {priority}); "
            f"drop max_price {text} or ask for priority spot"
        )
    return text


#: jobs one pipeline submits at most (after its sweeps are expanded)
MAX_PIPELINE_JOBS = 2000
#: jobs one sweep (``matrix``) makes at most
MAX_SWEEP_JOBS = 256


def env_text(value: str | int | float | bool) -> str:
    """A sweep value as its job sees it in the environment."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Resources(BaseModel):
    model_config = ConfigDict(extra="forbid")

    accelerators: str | None = None
    gpu_milli: int | None = Field(default=None, ge=1, le=999)
    cpus: Cpus | None = None  #: finite, at most bounds.MAX_CPUS
    memory: MemoryGib | None = None
    priority: Literal["on-demand", "spot", "reserved"] = "on-demand"
    #: spot bid per GPU-hour, decimal text; declared after ``priority`` so it can check it
    max_price: str | None = None

    @field_validator("max_price", mode="before")
    @classmethod
    def _max_price(cls, v: object, info: ValidationInfo) -> object:
        return check_max_price(v, info.data.get("priority", "spot"))

    @field_validator("accelerators", mode="before")
    @classmethod
    def _accel(cls, v: object) -> object:
        if isinstance(v, dict) and len(v) == 1:  # {H100: 8}
            ((k, n),) = v.items()
            v = f"{k}:{n}"
        if v is not None:
            if len(str(v)) > 100:
                raise ValueError("at most 100 characters (MODEL or MODEL:COUNT)")
            parse_accelerators(str(v))
            return str(v)
        return v

    @model_validator(mode="after")
    def _milli_needs_one(self) -> Resources:
        if self.gpu_milli and self.accelerators and parse_accelerators(self.accelerators).count != 1:
            raise ValueError(
                f"gpu_milli {self.gpu_milli} is a share of one GPU, but accelerators {self.accelerators} asks for "
                f"{parse_accelerators(self.accelerators).count} whole GPUs: use accelerators MODEL (count 1) with it"
            )
        return self

    @property
    def accel(self) -> Accelerators | None:
        return parse_accelerators(self.accelerators) if self.accelerators else None


class Task(BaseModel):
    #: inputs hidden from error text: an invalid task must not echo its secrets
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    name: Text = Field(default="", max_length=100)
    #: an image name of the platform's catalog (``suanli images list``); None: the default image
    image: Text | None = Field(default=None, max_length=200)
    resources: Resources = Field(default_factory=Resources)
    num_nodes: int = Field(default=1, ge=1, le=64)
    #: the LOCAL directory ``suanli launch`` packs and uploads (relative to the YAML); the
    #: server never reads a path of its own from a task and refuses a job that sends one
    workdir: Text | None = Field(default=None, max_length=4096)
    #: the upload id (SHA-256 of the archive, control/uploads.py) the CLI fills in from
    #: ``workdir``; the job runs with that tree as its working directory (/workspace/code)
    code: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    setup: Text | None = Field(default=None, max_length=100_000)
    run: Text = Field(min_length=1, max_length=100_000)
    envs: dict[str, str | int | float | bool] = Field(default_factory=dict, max_length=1000)
    #: name -> value, seen by the workload as environment variables; sealed at rest
    #: (``control.workload_secrets``), never in ``spec``, a listing, a log or an error
    secrets: dict[str, SecretStr] = Field(default_factory=dict, max_length=1000, repr=False)
    #: where the job keeps checkpoints, in its volume: relative to /workspace, or under it
    checkpoint_dir: Text | None = Field(default=None, max_length=4096)
    #: ``torch``: the platform starts torchrun on each node from the per-node variables, and
    #: torchrun runs ``run`` once per worker (``control.environment.torch_launch``)
    distributed: Literal["torch"] | None = None
    #: what it waits for: names of jobs in the same pipeline (a swept name: all of its
    #: jobs) or ids of this tenant's existing jobs
    depends_on: list[Annotated[Text, Field(min_length=1, max_length=100)] | Annotated[int, Field(ge=1, le=DB_INT_MAX)]] = Field(
        default_factory=list, max_length=MAX_PIPELINE_JOBS
    )
    #: ``succeeded``: runs once they all succeeded, cancelled if one fails or is
    #: cancelled; ``finished``: runs once they all ended, however
    after: Literal["succeeded", "finished"] = "succeeded"
    #: a sweep: env name -> values; one job per combination (``control.pipelines.expand``)
    matrix: dict[str, list[str | int | float | bool]] = Field(default_factory=dict, max_length=16)

    @field_validator("envs")
    @classmethod
    def _env_names(cls, v: dict) -> dict:
        for k in v:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
                raise ValueError(f"{k!r} is not a valid environment variable name")
        for k, value in v.items():  # here, not in the type: a union's error names each member
            if isinstance(value, str) and len(value) > 100_000:
                raise ValueError(f"{k}: at most 100000 characters")
            if isinstance(value, str) and "\x00" in value:
                raise ValueError(f"{k}: must not contain a NUL character (\\x00): an environment holds none")
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{k}: must be a finite number, got {value}")
        return v

    @field_validator("secrets", mode="before")
    @classmethod
    def _secret_text(cls, v: object) -> object:
        """Scalars as text, like envs; anything else is refused without echoing it
        (pydantic's message names the type, not the value)."""
        if isinstance(v, dict):
            return {k: str(x) if isinstance(x, bool | int | float) else x for k, x in v.items()}
        return v

    @field_validator("secrets")
    @classmethod
    def _secret_names(cls, v: dict, info: ValidationInfo) -> dict:
        try:
            check_names(list(v), info.data.get("envs") or {})
        except Invalid as exc:
            raise ValueError(exc.message.removeprefix("secrets: ")) from None
        return v

    @field_validator("checkpoint_dir")
    @classmethod
    def _checkpoint_in_volume(cls, v: str | None) -> str | None:
        if v is not None:
            volume_path(v)  # refused at submission: nothing is created for a path outside the volume
        return v

    @field_validator("depends_on")
    @classmethod
    def _no_duplicate_deps(cls, v: list) -> list:
        seen = set()
        for d in v:
            if d in seen:
                raise ValueError(f"{d!r} is listed twice")
            seen.add(d)
        return v

    @field_validator("matrix")
    @classmethod
    def _matrix(cls, v: dict) -> dict:
        combos = 1
        for k, values in v.items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
                raise ValueError(f"{k!r} is not a valid environment variable name")
            if not values:
                raise ValueError(f"{k}: no values (a sweep key needs at least one)")
            texts = [env_text(x) for x in values]
            if len(set(texts)) != len(texts):
                raise ValueError(f"{k}: a value is listed twice ({', '.join(texts)})")
            for x in texts:
                if not x or len(x) > 200 or "\x00" in x:
                    raise ValueError(f"{k}: a value must be 1..200 characters without NUL, got {x!r}")
            combos *= len(values)
        if combos > MAX_SWEEP_JOBS:
            raise ValueError(f"{combos} combinations: at most {MAX_SWEEP_JOBS} jobs per sweep")
        return v

    def secret_values(self) -> dict[str, str]:
        return {k: v.get_secret_value() for k, v in self.secrets.items()}


class Pipeline(BaseModel):
    """A pipeline file: jobs (tasks with names) submitted together, all or nothing."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    #: the group its jobs are listed under (default: the file's name)
    name: Text = Field(default="", max_length=80)
    jobs: list[Task] = Field(min_length=1, max_length=MAX_PIPELINE_JOBS)
