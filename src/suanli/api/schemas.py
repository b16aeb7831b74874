"""Request and response bodies of the HTTP API (apart from DB rows and domain
objects; ``convert`` joins them). The job request body is ``control.task.Task``,
the same model the task YAML is validated with."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator

from suanli.bounds import MAX_DISK_GIB, MAX_GPUS, Cpus, Finite, MemoryGib, TenantRef, Text
from suanli.control.task import check_max_price


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- requests --------------------------------------------------------------------------
class InstanceCreate(Strict):
    #: inputs hidden from error text: an invalid request must not echo its secrets
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    name: Text = Field(default="", max_length=100)
    gpu_model: Text | None = Field(default=None, max_length=50)
    gpu_count: int = Field(default=0, ge=0, le=MAX_GPUS)
    gpu_milli: int = Field(default=0, ge=0, le=999)
    cpus: Cpus | None = None
    memory_gib: MemoryGib | None = None
    image: Text | None = Field(
        default=None, max_length=200, description="an image name of `GET /v1/images`; null: the platform's default image"
    )
    disk_gib: int = Field(default=50, ge=1, le=MAX_DISK_GIB)
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(
        default_factory=list,
        max_length=16,
        description="container ports to publish through the server's proxy (`/proxy/instances/ID/PORT/`); 22 is SSH's",
    )
    priority: Literal["on-demand", "spot", "reserved"] = "on-demand"
    max_price: Text | None = Field(
        default=None,
        max_length=30,
        description="spot only: the most paid per GPU-hour, decimal text "
        '(e.g. "1.20"); above it the instance waits, and a running one is reclaimed with notice',
    )
    secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        repr=False,
        description="name -> value, in the instance's environment (exec, SSH); sealed at rest, shown masked in every listing",
    )
    autostop_s: int | None = Field(
        default=None,
        ge=0,
        le=366 * 86400,
        description="stop it (disk kept) after this many seconds without GPU or CPU activity or an open session; "
        "null: the tenant's or platform's default; 0: never. At least the platform's minimum (300 s by default)",
    )

    @field_validator("max_price", mode="before")
    @classmethod
    def _max_price(cls, v: object, info: ValidationInfo) -> object:
        return check_max_price(v, info.data.get("priority", "spot"))


class NodeUpdate(Strict):
    state: Literal["ready", "cordoned", "down"]


class VerificationIn(Strict):
    """A node's ``suanli verify --json`` report, to be judged and kept (operators)."""

    report: dict[str, Any] = Field(description="the object `suanli verify --json` printed on the node")
    uncordon: bool = Field(default=False, description="make the node ready again if it passes and is cordoned")


class VerifiedMark(BaseModel):
    """A node's latest ``suanli verify`` result: passed, failed (and cordoned) or unmeasured (no GPU seen)."""

    status: str
    at: str
    tflops_ratio: float | None = Field(default=None, description="lowest GPU's best dense 16-bit TFLOPS over the catalog peak")
    memory_ratio: float | None = Field(default=None, description="lowest GPU's verified memory over the datasheet's")
    bandwidth_ratio: float | None = Field(default=None, description="lowest GPU's device copy over the datasheet bandwidth")
    reasons: list[str] = Field(default_factory=list)


class VerificationOut(VerifiedMark):
    id: int
    node: str
    actor: str
    device: str
    gpu_count: int
    node_state: str | None = Field(default=None, description="the node's state after this result (when just recorded)")
    report: dict[str, Any] | None = None


class VerifyRunIn(Strict):
    """Verify a node by a job pinned to it, in its own container (operators)."""

    uncordon: bool = Field(default=False, description="make the node ready again if it passes and is cordoned")
    quick: bool = Field(default=False, description="`suanli verify --quick`: small sizes, few repeats")
    image: str | None = Field(default=None, max_length=200, description="catalog image [default: `verify`, else the default]")


class VerifyRunOut(BaseModel):
    """One verification run: its job, and once the job ended, the result it recorded or why none."""

    id: int
    node: str
    job_id: int
    job_state: str
    state: str = Field(description="waiting (the job has not ended) | recorded | failed (error says why; nothing recorded)")
    error: str = ""
    uncordon: bool
    actor: str
    verification: VerificationOut | None = Field(default=None, description="the result recorded (state recorded)")


class ExecRequest(Strict):
    command: Text = Field(min_length=1, max_length=100_000)
    timeout_s: Finite = Field(default=60.0, gt=0, le=3600)


class TenantCreate(Strict):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    require_2fa: bool = False


class TenantPatch(Strict):
    require_2fa: bool


class UserCreate(Strict):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]*$")
    role: Literal["admin", "operator", "member"] = "member"
    tenant: TenantRef | None = Field(default=None, description="the new user's tenant, by name; default: yours")
    password: Text | None = Field(default=None, max_length=1024, description="for console sign-in; at least 10 characters")


class UserPatch(Strict):
    disabled: bool | None = None
    password: Text | None = Field(default=None, max_length=1024)
    #: an admin turns off a user's second factor (a lost device)
    reset_2fa: bool = False


class PasswordChange(Strict):
    password: Text = Field(max_length=1024)
    current: Text | None = Field(default=None, max_length=1024)


class TokenCreate(Strict):
    name: Text = Field(default="", max_length=100)
    scopes: list[Text] = Field(
        default_factory=list, max_length=20, description="'read' (GET only), 'route:/v1/PATH' (only paths under it)"
    )
    expires_in_days: float | None = Field(default=None, gt=0, le=3660, allow_inf_nan=False)
    tenant: TenantRef | None = Field(default=None, description="pin the token to this tenant: it acts there only, as a member")


class SignIn(Strict):
    name: Text = Field(min_length=1, max_length=100)
    password: Text = Field(min_length=1, max_length=1024)
    code: Text | None = Field(default=None, max_length=10, description="the TOTP code, when two-factor sign-in is on")


class Code(Strict):
    code: Text = Field(min_length=1, max_length=10)


# -- responses -------------------------------------------------------------------------
class Me(BaseModel):
    id: int
    name: str
    role: str
    tenant_id: int


class TenantOut(BaseModel):
    id: int
    name: str
    require_2fa: bool = False
    autostop_s: int | None = Field(default=None, description="default idle auto-stop window of its new instances, s")


class UserOut(BaseModel):
    id: int
    name: str
    role: str
    tenant_id: int
    disabled: bool = False
    has_password: bool = False
    two_factor: bool = False
    token: str | None = Field(default=None, description="shown once, at creation")


class TokenInfo(BaseModel):
    id: int
    name: str
    user: str
    kind: str
    prefix: str = Field(description="the token's first characters, to tell it apart")
    scopes: list[str]
    tenant_id: int | None = Field(description="the one tenant it acts in; None: its user's rights")
    created_at: str
    expires_at: str | None
    last_used_at: str | None
    state: Literal["active", "expired", "revoked"]


class TokenOut(TokenInfo):
    token: str = Field(description="shown once")


class SessionOut(BaseModel):
    token: str
    token_id: int
    expires_at: str
    must_enrol_2fa: bool


class EnrolmentOut(BaseModel):
    secret: str = Field(description="base32, for an authenticator app; shown once")
    uri: str = Field(description="otpauth:// URI (a QR code of it)")


class AuditOut(BaseModel):
    id: int
    at: str
    actor_id: int | None
    actor: str
    actor_role: str
    tenant_id: int | None
    action: str
    object: str
    source: str
    result: str
    detail: dict
    prev_hash: str
    hash: str


class AuditVerdict(BaseModel):
    ok: bool
    checked: int
    bad_id: int | None
    problem: str


class GpuOut(BaseModel):
    index: int
    model: str
    uuid: str
    memory_mib: int
    virtual: bool
    used_milli: int


class NodeOut(BaseModel):
    id: int
    name: str
    zone: str
    backend: str
    state: str
    gpu_model: str
    gpu_count: int
    gpus_free: int
    virtual: bool
    cpu_milli: int
    cpu_used: int
    memory_mib: int
    mem_used: int
    heartbeat_at: datetime | None = Field(default=None, description="last heartbeat of the node's agent; null: not watched")
    gpus: list[GpuOut]
    verified: VerifiedMark | None = Field(default=None, description="latest `suanli verify` result; null: never verified")


class GpuModelOut(BaseModel):
    model: str
    total: int
    free: int
    free_milli: int
    virtual: bool
    memory_gib: float
    nodes: int
    vendor: str | None = Field(default=None, description="from the GPU catalog, when it knows the model")
    catalog_name: str | None = None
    bf16_tflops: float | None = Field(default=None, description="dense BF16, datasheet")
    mem_bandwidth_gbps: float | None = None
    verified: dict[str, Any] | None = Field(
        default=None,
        description="`suanli verify` over this model's nodes: passed/failed/unmeasured counts, lowest ratios of those "
        "that passed, newest date; null: none verified",
    )
    # prices now, from the current price book (billing.offers); null: the book does not
    # price this model (its usage is rated at zero)
    currency: str | None = Field(default=None, description="currency of the prices (ISO 4217, e.g. CNY)")
    price_per_gpu_hour: float | None = Field(default=None, description="on demand, per GPU-hour, in currency units")
    spot_price_per_gpu_hour: float | None = Field(
        default=None,
        description="spot, per GPU-hour now, at the model's utilisation now (it rises with it); "
        "what a spot bid (max_price) is compared with",
    )
    spot_utilisation_permille: int | None = Field(
        default=None, description="GPUs of the model allocated now over those registered, in permille: the spot price's input"
    )
    monthly_price_per_gpu: float | None = Field(
        default=None, description="monthly plan (包月), per GPU for a month of the book's hours per month, paid up front"
    )
    monthly_price_per_gpu_hour: float | None = Field(default=None, description="the monthly price as an hourly equivalent")
    reserved_price_per_gpu: float | None = Field(
        default=None, description="reserved plan, per GPU for the whole term (reserved_term_hours), paid up front"
    )
    reserved_price_per_gpu_hour: float | None = Field(default=None, description="the reserved price as an hourly equivalent")
    reserved_term_hours: int | None = Field(default=None, description="the reserved term, in hours (8760: one year)")
    priced_as: str | None = Field(default=None, description="the price book's name for the model")


class AllocationOut(BaseModel):
    node: str
    node_rank: int
    gpu_model: str
    gpu_indices: list[int]
    milli_per_gpu: int


class CostOut(BaseModel):
    """What a workload has cost so far and costs per hour now, in currency units
    (``*_micros``: exact, in millionths)."""

    currency: str
    so_far: float = Field(description="cost so far: rated + accruing")
    so_far_micros: int
    rated: float = Field(description="what billing has rated for it (its GPU and storage usage records)")
    accruing: float = Field(
        description="not yet rated: running work as if it stopped now, ended work no rating run reached; an estimate"
    )
    per_hour: float = Field(description="the rate now, per hour: gpu_per_hour + storage_per_hour")
    per_hour_micros: int
    gpu_per_hour: float = Field(
        description="the GPUs it holds now at their plan's price now (spot: at utilisation now, capped by the bid; "
        "reserved under a subscription: 0); 0 while it holds none (stopped, pending, finished)"
    )
    storage_per_hour: float = Field(
        description="its disk now, per hour: the running storage price while it holds GPUs, the stopped price "
        "otherwise (a stopped instance still pays for its disk); 0 for jobs and deleted instances. "
        "Data transfer is billed per GiB and is in neither rate"
    )


class MetricsOut(BaseModel):
    """A workload's resource use at one sample (``control.metrics``); a five-minute
    bucket's averages in the history (``resolution_s`` 300)."""

    ts: float | None = Field(default=None, description="when, epoch seconds; null: not sampled yet")
    resolution_s: int = Field(default=0, description="0: one sample; 300: the average of a five-minute bucket")
    cpu_percent: float | None = Field(default=None, description="percent of one core (100 = one core busy); null: no sample")
    memory_mib: float | None = Field(default=None, description="memory in use, MiB; null: no sample")
    gpu_util_percent: float | None = Field(
        default=None, description="GPU utilisation from NVML, averaged over its GPUs; null: not measured (see gpu_note)"
    )
    gpu_memory_mib: float | None = Field(default=None, description="GPU memory used, MiB (NVML); null: not measured")
    power_w: float | None = Field(default=None, description="GPU power draw, W (NVML); null: not measured")
    sessions: int | None = Field(
        default=None, description="open SSH or port-proxy connections into it; null: not measurable (host processes)"
    )
    gpu_note: str = Field(default="", description='why GPU figures are null, e.g. "not measured: virtual GPU"')


class InstanceOut(BaseModel):
    id: int
    tenant_id: int = Field(description="whose it is (an operator's listing holds every tenant's)")
    name: str
    state: str
    desired: str
    gpu_model: str | None
    gpu_count: int
    gpu_milli: int
    cpu_milli: int
    memory_mib: int
    image: str
    disk_gib: int
    priority: str
    max_price: str | None = Field(default=None, description="spot bid per GPU-hour, decimal text; null: none")
    runtime: str = Field(description="`container`, or `process (no isolation)`; what runs (or last ran) it")
    ssh: str | None = Field(
        default=None,
        description="a complete OpenSSH command line into the instance, "
        "to which only `-i KEYFILE` needs adding; null while it is not running or has no sshd",
    )
    ports: dict[str, str] = Field(default_factory=dict, description="container port -> URL of the server's proxy")
    gpu_access: str | None = Field(
        default=None,
        description="how its GPUs are given: `cdi` (NVIDIA CDI devices "
        "of exactly the allocated GPUs) or `virtual` (CUDA_VISIBLE_DEVICES only)",
    )
    reason: str
    waiting: WaitingOut | None = Field(default=None, description="why it waits, while pending or queued; null otherwise")
    allocations: list[AllocationOut]
    created_at: datetime
    updated_at: datetime
    cost: CostOut | None = Field(default=None, description="cost so far and rate now; null where not computed")
    cost_so_far: float | None = Field(default=None, description="cost so far (= cost.so_far); null where not computed")
    metrics: MetricsOut = Field(default_factory=MetricsOut, description="its latest usage sample (all null before one)")
    autostop_s: int | None = Field(default=None, description="idle auto-stop window, seconds; null: never stopped for idleness")
    notice: str | None = Field(
        default=None, description="a pending notice (idle auto-stop, spot reclaim, funds): why, and when it takes effect"
    )
    secrets: dict[str, str] = Field(
        default_factory=dict, description='its secrets\' names, values masked ("******"); values are never shown'
    )


class WaitingOut(BaseModel):
    """Why a pending instance or queued job waits (``control.waiting``)."""

    code: str = Field(
        description="capacity | gang | pinned-node | quota | balance | price-above-bid | dependency | never-fits: "
        "what it waits for, for scripts to branch on"
    )
    detail: str = Field(description="the specifics, for people (the filter that ruled out every node, the quota, the price)")
    since: datetime | None = Field(
        default=None, description="when it began waiting for this code (kept in the server's memory; null: unknown)"
    )


class JobOut(BaseModel):
    id: int
    tenant_id: int = Field(description="whose it is (an operator's listing holds every tenant's)")
    name: str
    state: str
    exit_code: int | None
    gpu_model: str | None
    gpu_count: int
    gpu_milli: int
    num_nodes: int
    priority: str
    max_price: str | None = Field(default=None, description="spot bid per GPU-hour (resources.max_price); null: none")
    cancel_requested: bool
    reason: str
    waiting: WaitingOut | None = Field(default=None, description="why it waits, while pending or queued; null otherwise")
    allocations: list[AllocationOut]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    spec: dict
    runtime: str = Field(default="", description='`container` or `process` (no isolation); "" before its first launch')
    cost: CostOut | None = Field(default=None, description="cost so far and rate now; null where not computed")
    cost_so_far: float | None = Field(default=None, description="cost so far (= cost.so_far); null where not computed")
    metrics: MetricsOut = Field(default_factory=MetricsOut, description="its latest usage sample (all null before one)")
    secrets: dict[str, str] = Field(
        default_factory=dict, description='its secrets\' names, values masked ("******"); values are never shown'
    )
    depends_on: list[int] = Field(default_factory=list, description="ids of the jobs it waits for (task `depends_on`)")
    group: str = Field(default="", description='the pipeline or sweep it was submitted in ("name#first-id"); "" for none')


class ExecOut(BaseModel):
    exit_code: int
    output: str


class LogsOut(BaseModel):
    text: str


class EventOut(BaseModel):
    id: int
    ts: datetime
    kind: str
    object_id: int
    from_state: str | None
    to_state: str
    message: str


class WebhookSet(Strict):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    url: Text = Field(max_length=2000, description="http(s) URL the tenant's alerts are POSTed to")
    secret: SecretStr | None = Field(
        default=None, description="HMAC-SHA256 key of X-Suanli-Signature, 16..200 characters; null: one is made and shown once"
    )


class WebhookOut(BaseModel):
    url: str | None = Field(description="where alerts are POSTed; null: no webhook")
    secret: str | None = Field(default=None, description="the signing secret: in the answer to setting it only")


class AutostopSet(Strict):
    autostop_s: int | None = Field(
        ge=0, le=366 * 86400, description="the tenant's default idle auto-stop window for new instances; null or 0: none"
    )


class AlertOut(BaseModel):
    id: int
    tenant_id: int
    kind: str = Field(description="idle | autostop | low_balance | budget | job_failed | node_down")
    object: str
    message: str
    created_at: datetime
    delivery: str = Field(description="pending | delivered | failed (retries spent) | none (no webhook)")
    attempts: int
    last_error: str
